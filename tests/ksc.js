// Compile .ksy files to Python with the official Kaitai Struct compiler (its JavaScript build):
// node tests/ksc.js NODE_MODULES OUT_DIR FILE.ksy... (tests/test_kaitai.py drives it)
const fs = require("fs");
const path = require("path");
const [modules, out, ...specs] = process.argv.slice(2);
const compiler = require(path.join(modules, "kaitai-struct-compiler"));
const yaml = require(path.join(modules, "js-yaml"));
(async () => {
  for (const spec of specs) {
    const files = await compiler.compile("python", yaml.load(fs.readFileSync(spec, "utf8")), null, false);
    for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(out, name), text);
  }
})().catch((err) => { console.error(String(err && err.stack || err)); process.exit(1); });
