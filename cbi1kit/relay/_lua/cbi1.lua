-- The cbi1 protocol: a CBI1 frame (a FilterUpdate's payload) field by field, from GEN.cbi1's
-- layouts, and decode's checks in decode's order; the first that fails is expert info naming
-- its rule (decode stops there too). A snapshot chunk's words are counted, not listed.
local C = GEN.cbi1
local L = helpers.by_name(C.layouts)
local format = string.format
local HEADER_LEN = helpers.stop(C.layouts.header)
local SNAPSHOT_WORDS = helpers.stop(C.layouts.snapshot)
local IMAGES = helpers.stop(C.layouts.delta)
local IMAGE_LEN = helpers.stop(C.layouts.image)
local SHOWN_IMAGES, SHOWN_WORDS = 64, 4 -- tree items, not checks: every image is checked
local M32 = 4294967296

local proto = Proto("cbi1", "CBI1 cuckoo bucket images (Dynamo KV relay filter frame)")
local fields = {}
local pf = helpers.protofields("cbi1", C.layouts, { "header", "snapshot", "delta", "image" },
  C, fields)
local extra = {
  word_count = ProtoField.uint32("cbi1.snapshot.word_count", "word_count", base.DEC, nil, nil,
    "u64 bucket words after the chunk's prefix"),
  word = ProtoField.uint64("cbi1.snapshot.word", "word", base.HEX, nil, nil,
    "a bucket word (the chunk's first few are shown)"),
  body_hash = ProtoField.uint32("cbi1.body_hash", "body_hash", base.HEX, nil, nil,
    "low 32 bits of xxh3_64 (seed 0) of the body, as computed"),
}
helpers.register(proto, fields, extra)

-- an expert per rule decode checks: cbi1.rule.<rule id without cbi1->
local E, experts = {}, {}
for id, message in pairs(C.rules) do
  local short = id:gsub("^cbi1%-", ""):gsub("%-", "_")
  local group = id == "cbi1-checksum" and expert.group.CHECKSUM or expert.group.MALFORMED
  E[id] = ProtoExpert.new("cbi1.rule." .. short, message, group, expert.severity.ERROR)
  experts[#experts + 1] = E[id]
end
proto.experts = experts

local function kinds_text()
  local parts = {}
  for value, name in pairs(C.kinds) do
    parts[#parts + 1] = format("%d = %s", value, name)
  end
  table.sort(parts)
  return table.concat(parts, ", ")
end

-- length, magic, wire version, checksum, the fixed fields, flags: rule, field name, text
local function header_checks(raw, n, hash)
  if n < HEADER_LEN then
    return "cbi1-truncated", nil, format("%d bytes, the header alone is %d", n, HEADER_LEN)
  end
  if n > C.max_frame then
    return "cbi1-frame-too-large", nil, format("%d bytes, the maximum is %d", n, C.max_frame)
  end
  local magic = helpers.bytes(raw, L.header.magic, 0)
  if magic ~= C.magic then
    local rule = magic == C.legacy_magic and "cbi1-legacy-ckf1" or "cbi1-magic"
    return rule, "magic", format("first bytes are %q, expected %q", magic, C.magic)
  end
  local version = helpers.get(raw, L.header.wire_version, 0)
  if version ~= C.wire_version then
    return "cbi1-wire-version", "wire_version", format("unsupported CBI1 wire version %d", version)
  end
  local stated = helpers.get(raw, L.header.body_checksum, 0)
  if stated ~= hash then
    return "cbi1-checksum", "body_checksum",
      format("frame says 0x%08x, body hashes to 0x%08x", stated, hash)
  end
  for _, fixed in ipairs(C.fixed) do
    local actual = helpers.get(raw, L.header[fixed.name], 0)
    if actual ~= fixed.value then
      return "cbi1-format-shape", fixed.name,
        format("unsupported %s %d (expected %d)", fixed.what, actual, fixed.value)
    end
  end
  local flags = helpers.get(raw, L.header.flags, 0)
  if not C.kinds[flags] then
    return "cbi1-flags", "flags",
      format("unknown CBI1 frame flags 0x%04x (%s)", flags, kinds_text())
  end
end

-- a body shorter than its fixed prefix: the rule, no field (the body ends first), and why
local function short_body(rule, what, body, prefix)
  return rule, nil, format("%s body is %d bytes, its fixed prefix alone is %d", what, body, prefix)
end

-- a delta's body: its length, then every image's bucket against the lane
local function delta_checks(raw, n)
  local body, prefix = n - HEADER_LEN, IMAGES - HEADER_LEN
  if body < prefix then
    return short_body("cbi1-delta-length", "delta", body, prefix)
  end
  local count = helpers.get(raw, L.delta.image_count, 0)
  if count > C.max_delta_images then
    return "cbi1-delta-length", "image_count",
      format("delta has %d images, exceeding the CBI1 maximum %d", count, C.max_delta_images)
  end
  local expected = prefix + IMAGE_LEN * count
  if body ~= expected then
    return "cbi1-delta-length", "image_count",
      format("image_count %d needs a %d-byte body, found %d", count, expected, body)
  end
  local lanes_hi, lanes = helpers.get64(raw, L.header.bucket_count, 0)
  for i = 0, count - 1 do
    local bucket = helpers.get(raw, L.image.bucket, IMAGES + i * IMAGE_LEN)
    if lanes_hi == 0 and bucket >= lanes then
      return "cbi1-delta-bucket-range", nil,
        format("image %d names bucket %d, the lane has %d", i, bucket, lanes)
    end
  end
end

-- a snapshot chunk's body: prefix, index below count, whole words, words inside the lane
local function chunk_checks(raw, n)
  local body, prefix = n - HEADER_LEN, SNAPSHOT_WORDS - HEADER_LEN
  if body < prefix then
    return short_body("cbi1-chunk-layout", "snapshot", body, prefix)
  end
  local index = helpers.get(raw, L.snapshot.chunk_index, 0)
  local count = helpers.get(raw, L.snapshot.chunk_count, 0)
  if count == 0 then
    return "cbi1-chunk-layout", "chunk_count", "chunk_count is 0"
  end
  if index >= count then
    return "cbi1-chunk-layout", "chunk_index",
      format("chunk_index %d is not below chunk_count %d", index, count)
  end
  local bytes = n - SNAPSHOT_WORDS
  if bytes % C.word_bytes ~= 0 then
    return "cbi1-chunk-layout", nil,
      format("%d word bytes is not a whole number of u64 words", bytes)
  end
  local words = bytes / C.word_bytes
  if words > C.chunk_buckets then
    return "cbi1-chunk-layout", nil,
      format("snapshot chunk has %d words, exceeding the CBI1 maximum %d", words, C.chunk_buckets)
  end
  local off_hi, off_lo = helpers.get64(raw, L.snapshot.bucket_offset, 0)
  local lanes_hi, lanes_lo = helpers.get64(raw, L.header.bucket_count, 0)
  local end_lo = off_lo + words
  local end_hi = off_hi + (end_lo >= M32 and 1 or 0)
  end_lo = end_lo % M32
  if end_hi >= M32 or end_hi > lanes_hi or (end_hi == lanes_hi and end_lo > lanes_lo) then
    return "cbi1-chunk-layout", "bucket_offset",
      format("bucket_offset %s + %d words ends past the %s-bucket lane",
        helpers.u64_text(off_hi, off_lo), words, helpers.u64_text(lanes_hi, lanes_lo))
  end
end

local function add_delta(root, tvb, raw, n, items)
  local t = root:add(tvb(HEADER_LEN, n - HEADER_LEN), "delta")
  for name, item in pairs(helpers.add(t, tvb, pf, C.layouts.delta, 0)) do
    items[name] = item
  end
  if n < IMAGES then
    return "a short body"
  end
  local count = math.floor((n - IMAGES) / IMAGE_LEN)
  for i = 0, math.min(count, SHOWN_IMAGES) - 1 do
    local at = IMAGES + i * IMAGE_LEN
    local bucket = helpers.get(raw, L.image.bucket, at)
    local word = helpers.hex64(helpers.get64(raw, L.image.word, at))
    local it = t:add(tvb(at, IMAGE_LEN), format("image %d: bucket %d, word %s", i, bucket, word))
    helpers.add(it, tvb, pf, C.layouts.image, at)
  end
  if count > SHOWN_IMAGES then
    t:add(tvb(IMAGES + SHOWN_IMAGES * IMAGE_LEN), format("%d more images", count - SHOWN_IMAGES))
  end
  return format("base_epoch %s, %d image%s",
    helpers.u64_text(helpers.get64(raw, L.delta.base_epoch, 0)), count, count == 1 and "" or "s")
end

local function add_chunk(root, tvb, raw, n, items)
  local t = root:add(tvb(HEADER_LEN, n - HEADER_LEN), "snapshot chunk")
  for name, item in pairs(helpers.add(t, tvb, pf, C.layouts.snapshot, 0)) do
    items[name] = item
  end
  if n < SNAPSHOT_WORDS then
    return "a short body"
  end
  local words = math.floor((n - SNAPSHOT_WORDS) / C.word_bytes)
  if n > SNAPSHOT_WORDS then
    t:add(extra.word_count, tvb(SNAPSHOT_WORDS), words):set_generated()
  else
    t:add(extra.word_count, words):set_generated()
  end
  for i = 0, math.min(words, SHOWN_WORDS) - 1 do
    t:add_le(extra.word, tvb(SNAPSHOT_WORDS + i * C.word_bytes, C.word_bytes))
  end
  return format("chunk %d/%d, %d words", helpers.get(raw, L.snapshot.chunk_index, 0),
    helpers.get(raw, L.snapshot.chunk_count, 0), words)
end

-- the header, the body its flags name (as far as the bytes go), then decode's checks
function proto.dissector(tvb, pinfo, tree)
  local n = tvb:len()
  local raw = helpers.raw(tvb, 0, n)
  local root = tree:add(proto, tvb())
  local items = helpers.add(root:add(tvb(0, math.min(n, HEADER_LEN)), "header"), tvb, pf,
    C.layouts.header, 0)
  local hash = nil
  if n >= HEADER_LEN then
    hash = helpers.check(raw:sub(HEADER_LEN + 1))
    local body = n > HEADER_LEN and tvb(HEADER_LEN) or tvb(0, HEADER_LEN)
    root:add(extra.body_hash, body, hash):set_generated()
  end
  local rule, field, text = header_checks(raw, n, hash)
  local kind = n >= HEADER_LEN and C.kinds[helpers.get(raw, L.header.flags, 0)]
  local summary = ""
  if kind and n > HEADER_LEN then
    local add = kind == C.kinds[C.delta] and add_delta or add_chunk
    summary = ", " .. add(root, tvb, raw, n, items)
  end
  if not rule and kind then
    local checks = kind == C.kinds[C.delta] and delta_checks or chunk_checks
    rule, field, text = checks(raw, n)
  end
  local epoch = n >= HEADER_LEN and helpers.u64_text(helpers.get64(raw, L.header.epoch, 0)) or "?"
  local label = format("CBI1 %s epoch %s%s", kind or "frame", epoch, summary)
  root:append_text(", " .. label)
  if not tostring(pinfo.cols.protocol):find("CBI1", 1, true) then
    pinfo.cols.protocol:append("/CBI1") -- after kvrcap's or gRPC's name
  end
  pinfo.cols.info:append(" [" .. label .. "]")
  if rule then
    local item = field and items[field] or root
    item:add_proto_expert_info(E[rule], C.rules[rule] .. ": " .. text)
  end
  return n
end

DissectorTable.get("protobuf_field"):add(C.payload_field, proto)
return proto
