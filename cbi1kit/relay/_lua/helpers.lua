-- What both protocols share: a layout's rows (GEN's tables) as ProtoFields, added to a tree,
-- and read as numbers out of a Lua string (0-based offsets, little-endian; a u64 as hi, lo).
local byte, format = string.byte, string.format
local H = {}

-- each layout's rows by field name: L.header.flags is the row of header.flags
function H.by_name(layouts)
  local out = {}
  for region, rows in pairs(layouts) do
    local named = {}
    for _, row in ipairs(rows) do
      named[row.name] = row
    end
    out[region] = named
  end
  return out
end

-- the offset just past a layout's last field
function H.stop(rows)
  local last = rows[#rows]
  return last.offset + last.size
end

local UINT = {
  u8 = ProtoField.uint8, u16 = ProtoField.uint16, u32 = ProtoField.uint32, u64 = ProtoField.uint64,
}

-- a ProtoField for every row of the named layouts, called prefix .. "." .. its path; a row's
-- ``values`` names a value table of ``values``; each field is appended to ``list`` too
function H.protofields(prefix, layouts, names, values, list)
  local pf = {}
  for _, region in ipairs(names) do
    for _, row in ipairs(layouts[region]) do
      local abbr = prefix .. "." .. row.path
      local field
      if row.kind == "magic" then
        field = ProtoField.string(abbr, row.name, base.ASCII, row.doc)
      elseif row.kind == "magic8" then
        field = ProtoField.bytes(abbr, row.name, base.SPACE, row.doc)
      else
        local shown = row.hex and base.HEX or base.DEC
        local named = row.values and values[row.values]
        field = UINT[row.kind](abbr, row.name, shown, named, nil, row.doc)
      end
      pf[row.path] = field
      list[#list + 1] = field
    end
  end
  return pf
end

-- the protocol's fields: the layouts' (``fields``), then its own ``extra`` ones
function H.register(proto, fields, extra)
  for _, field in pairs(extra) do
    fields[#fields + 1] = field
  end
  proto.fields = fields
end

-- the rows' fields that lie inside tvb, each at ``at`` + its offset: their tree items by name
function H.add(tree, tvb, pf, rows, at)
  local items, n = {}, tvb:len()
  for _, row in ipairs(rows) do
    local off = at + row.offset
    if off + row.size > n then
      break
    end
    if row.kind == "magic" or row.kind == "magic8" then
      items[row.name] = tree:add(pf[row.path], tvb(off, row.size))
    else
      items[row.name] = tree:add_le(pf[row.path], tvb(off, row.size))
    end
  end
  return items
end

-- the unsigned little-endian integer of ``size`` (<= 4) bytes at 0-based ``off`` of s
function H.le(s, off, size)
  local value, scale = 0, 1
  for i = off + 1, off + size do
    value = value + byte(s, i) * scale
    scale = scale * 256
  end
  return value
end

-- a field of up to 32 bits, a row at ``at`` in s
function H.get(s, row, at)
  return H.le(s, at + row.offset, row.size)
end

-- a u64 field: hi, lo
function H.get64(s, row, at)
  local off = at + row.offset
  return H.le(s, off + 4, 4), H.le(s, off, 4)
end

-- a field's bytes (a magic)
function H.bytes(s, row, at)
  local off = at + row.offset
  return s:sub(off + 1, off + row.size)
end

-- a u64 as decimal text (UInt64: Lua 5.2 numbers are doubles)
function H.u64_text(hi, lo)
  return tostring(UInt64.new(lo, hi))
end

function H.hex64(hi, lo)
  return format("0x%08x%08x", hi, lo)
end

-- the low 32 bits of xxh3_64 (seed 0) of s: CBI1's body checksum and kvrcap's checks
function H.check(s)
  local _, lo = xxh3.xxh3_64(s)
  return lo
end

-- s[from, to) of a tvb as a Lua string ("" when empty)
function H.raw(tvb, from, to)
  if to <= from then
    return ""
  end
  local s = tvb:raw(from, to - from)
  return s
end

return H
