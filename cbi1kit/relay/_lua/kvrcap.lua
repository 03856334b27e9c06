-- kvrcap captures: a file reader (FileHandler) giving a packet per record (header and body),
-- timed by recv_unix_ns to the nanosecond, and the kvrcap protocol on those packets: the
-- record header from GEN.kvrcap's layout, its two checks, and the body by record type; a
-- MESSAGE goes to the protobuf dissector as the response type of its stream's method (learnt
-- from the stream's STREAM_OPEN), so CBI1 shows inside a FilterUpdate.
-- No callback of the reader ends in a tail call: ``return f(...)`` drops the callback's frame
-- and lets the collector free the File/CaptureInfo/FrameInfo that Wireshark still marks after
-- the call (a heap corruption on a share of runs); results are kept in a local first.
local K = GEN.kvrcap
local L = helpers.by_name(K.layouts)
local format = string.format
local FILE_LEN = helpers.stop(K.layouts.file)
local RECORD_LEN = helpers.stop(K.layouts.record)
local ENCAP = wtap_encaps.USER15
local SHOWN_OFFSETS = 16
local NS = 1000000000

local proto = Proto("kvrcap", "cbi1kit kvrcap capture record")
local fields = {}
local pf = helpers.protofields("kvrcap", K.layouts, { "record", "index", "trailer" }, K, fields)
local extra = {
  method = ProtoField.string("kvrcap.stream.method", "method", base.ASCII,
    "the gRPC method of the record's stream, from its STREAM_OPEN"),
  json_len = ProtoField.uint32("kvrcap.open.json_len", "json_len", base.DEC, nil, nil,
    "bytes of the STREAM_OPEN JSON"),
  json = ProtoField.string("kvrcap.open.json", "json", base.UNICODE,
    "target, method, metadata and info of the stream"),
  text = ProtoField.string("kvrcap.text", "text", base.UNICODE, "a MARK or STREAM_CLOSE body"),
  body = ProtoField.bytes("kvrcap.body", "body", base.NONE, "the record's body"),
  offset = ProtoField.uint64("kvrcap.index.offset", "offset", base.DEC, nil, nil,
    "a listed record's byte offset"),
}
helpers.register(proto, fields, extra)
local E = {
  header = ProtoExpert.new("kvrcap.check.header", "kvrcap record header checksum mismatch",
    expert.group.CHECKSUM, expert.severity.ERROR),
  body = ProtoExpert.new("kvrcap.check.body", "kvrcap record body checksum mismatch",
    expert.group.CHECKSUM, expert.severity.ERROR),
}
proto.experts = { E.header, E.body }

-- ------------------------------------------------------------------------- the file reader

-- the file header's length when the file is a kvrcap capture of a version read here, else nil
local function file_header(file)
  local head = file:read(FILE_LEN)
  if not head or #head < FILE_LEN or helpers.bytes(head, L.file.magic, 0) ~= K.file_magic then
    return nil
  end
  if helpers.get(head, L.file.format_version, 0) ~= K.format_version then
    return nil
  end
  local header_len = helpers.get(head, L.file.header_len, 0)
  return header_len
end

local function read_open(file, capture)
  local header_len = file_header(file)
  if not header_len then
    return false
  end
  file:seek("set", header_len)
  capture.encap = ENCAP
  capture.time_precision = wtap_tsprecs.NSEC
  capture.snapshot_length = 0
  return true
end

-- the record at ``offset`` (the file stands there) into frame: whole, or false
local function read_record(file, frame, offset)
  local head = file:read(RECORD_LEN)
  if not head or #head < RECORD_LEN or helpers.bytes(head, L.record.magic, 0) ~= K.record_magic then
    return false
  end
  local total = RECORD_LEN + helpers.get(head, L.record.body_len, 0)
  local hi, lo = helpers.get64(head, L.record.recv_unix_ns, 0)
  local ns = UInt64.new(lo, hi)
  frame.time = NSTime.new((ns / NS):tonumber(), (ns % NS):tonumber())
  frame.rec_type = wtap_rec_types.PACKET
  frame.flags = wtap_presence_flags.TS
  frame.captured_length = total
  frame.original_length = total
  file:seek("set", offset)
  local ok = frame:read_data(file, total)
  return ok
end

local function read(file, capture, frame)
  local offset = file:seek()
  local ok = read_record(file, frame, offset)
  if not ok then
    return false
  end
  return offset
end

local function seek_read(file, capture, frame, offset)
  file:seek("set", offset)
  local ok = read_record(file, frame, offset)
  return ok
end

local function read_close(file, capture)
  return true
end

local handler = FileHandler.new("kvrcap (cbi1kit)", "kvrcap",
  "cbi1kit capture of Dynamo KV relay gRPC streams", "rm")
handler.read_open = read_open
handler.read = read
handler.seek_read = seek_read
handler.read_close = read_close
handler.seq_read_close = read_close
handler.extensions = "kvrcap"
register_filehandler(handler)

-- ----------------------------------------------------------------------- the record protocol

local protobuf = Dissector.get("protobuf")
local streams, frame_methods = {}, {}

function proto.init()
  streams, frame_methods = {}, {}
end

local function as_protobuf(tvb, pinfo, tree, message)
  pinfo.private["pb_msg_type"] = "message," .. message
  protobuf:call(tvb, pinfo, tree)
end

local BODY = {}

function BODY.STREAM_OPEN(tvb, pinfo, tree, root, stream, raw)
  local n, at = #raw, RECORD_LEN + K.open_json_len
  if n < at then
    return
  end
  local json_len = helpers.le(raw, RECORD_LEN, K.open_json_len)
  root:add_le(extra.json_len, tvb(RECORD_LEN, K.open_json_len))
  local json = raw:sub(at + 1, at + json_len)
  if json_len > 0 and at + json_len <= n then
    root:add(extra.json, tvb(at, json_len))
  end
  local method = json:match('"method"%s*:%s*"([^"]*)"')
  if not method then
    return
  end
  streams[stream] = method
  root:add(extra.method, method):set_generated()
  local types = K.methods[method]
  if types and at + json_len < n then
    as_protobuf(tvb(at + json_len):tvb(), pinfo, tree, types.request)
  end
end

function BODY.MESSAGE(tvb, pinfo, tree, root, stream, raw)
  local method = frame_methods[pinfo.number] or streams[stream]
  frame_methods[pinfo.number] = method
  if method then
    root:add(extra.method, method):set_generated()
    pinfo.cols.info:append(" " .. method:gsub("^.*/", ""))
  end
  local types = method and K.methods[method]
  if types then
    as_protobuf(tvb(RECORD_LEN):tvb(), pinfo, tree, types.response)
  else
    root:add(extra.body, tvb(RECORD_LEN))
  end
end

function BODY.INDEX(tvb, pinfo, tree, root, stream, raw)
  helpers.add(root, tvb, pf, K.layouts.index, RECORD_LEN)
  local first = RECORD_LEN + helpers.stop(K.layouts.index)
  local count = math.max(0, math.floor((#raw - first) / 8))
  for i = 0, math.min(count, SHOWN_OFFSETS) - 1 do
    root:add_le(extra.offset, tvb(first + 8 * i, 8))
  end
  if count > SHOWN_OFFSETS then
    root:add(tvb(first + 8 * SHOWN_OFFSETS), format("%d more offsets", count - SHOWN_OFFSETS))
  end
end

function BODY.TRAILER(tvb, pinfo, tree, root, stream, raw)
  helpers.add(root, tvb, pf, K.layouts.trailer, RECORD_LEN)
end

function BODY.MARK(tvb, pinfo, tree, root, stream, raw)
  root:add(extra.text, tvb(RECORD_LEN))
end

BODY.STREAM_CLOSE = BODY.MARK

-- the record header's own check and the body's, as expert info where they fail
local function check_record(raw, items)
  local row = L.record.header_check
  local stated, actual = helpers.get(raw, row, 0), helpers.check(raw:sub(1, row.offset))
  if stated ~= actual then
    items.header_check:add_proto_expert_info(E.header,
      format("record header checksum mismatch: header says 0x%08x, its bytes hash to 0x%08x",
        stated, actual))
  end
  stated = helpers.get(raw, L.record.body_check, 0)
  actual = helpers.check(raw:sub(RECORD_LEN + 1))
  if stated ~= actual then
    items.body_check:add_proto_expert_info(E.body,
      format("record body checksum mismatch: header says 0x%08x, the body hashes to 0x%08x",
        stated, actual))
  end
end

function proto.dissector(tvb, pinfo, tree)
  local n = tvb:len()
  pinfo.cols.protocol = "kvrcap"
  local root = tree:add(proto, tvb())
  local items = helpers.add(root, tvb, pf, K.layouts.record, 0)
  if n < RECORD_LEN then
    return n
  end
  local raw = helpers.raw(tvb, 0, n)
  check_record(raw, items)
  local kind = helpers.get(raw, L.record.record_type, 0)
  local stream = helpers.get(raw, L.record.stream_id, 0)
  local name = K.record_types[kind] or format("type %d", kind)
  pinfo.cols.info = format("%s stream %d", name, stream)
  root:append_text(format(", record %s: %s, stream %d",
    helpers.u64_text(helpers.get64(raw, L.record.record_index, 0)), name, stream))
  local body = BODY[name]
  if body and n > RECORD_LEN then
    body(tvb, pinfo, tree, root, stream, raw)
  elseif n > RECORD_LEN then
    root:add(extra.body, tvb(RECORD_LEN))
  end
  return n
end

DissectorTable.get("wtap_encap"):add(ENCAP, proto)
