-- XXH3-64 (seed 0, the default secret), exact in Lua 5.2 to 5.4: Lua 5.2 numbers are doubles,
-- so a u64 is two 32-bit halves (hi, lo), xor goes through bit32, and a 32x32 product is split
-- at 16 bits so no partial product passes 2^53. The long path keeps each accumulator as
-- lo + mid * 2^16 + hi * 2^32 with the carries put off to the end of a block (16 stripes
-- stay under 2^53), so a stripe costs two bxor calls and arithmetic per lane.
-- xxh3_64(s) returns hi, lo of XXH3_64bits(s); the algorithm is xxhash.h's (v0.8).

-- Lua 5.3 and 5.4 (Wireshark 4.4 on) have no bit32 but operators a 5.2 parser cannot read, so
-- they are compiled from a string only where bit32 is missing: bit32's results, on u32 halves.
local bit = bit32 or load([[
  local M = 0xFFFFFFFF
  return {
    bxor = function(a, b, c) return (a ~ b ~ (c or 0)) & M end,
    bor = function(a, b, c, d) return (a | b | (c or 0) | (d or 0)) & M end,
    band = function(a, b) return a & b & M end,
    lshift = function(a, n) return (a << n) & M end,
    rshift = function(a, n) return (a & M) >> n end,
  }]])()
local bxor, bor, band = bit.bxor, bit.bor, bit.band
local lshift, rshift = bit.lshift, bit.rshift
local byte = string.byte
local M32, M16 = 4294967296, 65536

local SECRET_HEX = "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    .. "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    .. "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    .. "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    .. "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    .. "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
local SECRET = (SECRET_HEX:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end))
local SECRET_SIZE, STRIPE, STRIPES_PER_BLOCK = 192, 64, 16
local BLOCK = STRIPE * STRIPES_PER_BLOCK

local P32_1, P32_2, P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
local P64_1H, P64_1L = 0x9E3779B1, 0x85EBCA87
local P64_2H, P64_2L = 0xC2B2AE3D, 0x27D4EB4F
local P64_3H, P64_3L = 0x165667B1, 0x9E3779F9
local P64_4H, P64_4L = 0x85EBCA77, 0xC2B2AE63
local P64_5H, P64_5L = 0x27D4EB2F, 0x165667C5
local MX1H, MX1L = 0x16566791, 0x9E3779F9
local MX2H, MX2L = 0x9FB21C65, 0x1E98DF25

-- little-endian reads at 0-based offset p
local function le32(s, p)
  local b1, b2, b3, b4 = byte(s, p + 1, p + 4)
  return b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
end

local function le64(s, p)
  local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, p + 1, p + 8)
  return b5 + b6 * 256 + b7 * 65536 + b8 * 16777216, b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
end

-- the 64-bit product of two u32: hi, lo
local function mul32(a, b)
  local b1 = b % M16
  local p2 = a * ((b - b1) / M16)
  local p2lo = p2 % M16
  local t = a * b1 + p2lo * M16
  local lo = t % M32
  return (t - lo) / M32 + (p2 - p2lo) / M16, lo
end

-- the low 32 bits of the product of two u32
local function mullo32(a, b)
  local b1 = b % M16
  return (a * b1 + (a * ((b - b1) / M16) % M16) * M16) % M32
end

local function add64(ah, al, bh, bl)
  local l = al + bl
  if l >= M32 then
    return (ah + bh + 1) % M32, l - M32
  end
  return (ah + bh) % M32, l
end

local function sub64(ah, al, bh, bl)
  local l = al - bl
  if l < 0 then
    return (ah - bh - 1) % M32, l + M32
  end
  return (ah - bh) % M32, l
end

-- the low 64 bits of a u64 product
local function mul64(ah, al, bh, bl)
  local h, l = mul32(al, bl)
  return (h + mullo32(ah, bl) + mullo32(al, bh)) % M32, l
end

-- the 128-bit product of two u64, its halves xored (XXH3_mul128_fold64)
local function fold64(ah, al, bh, bl)
  local llh, lll = mul32(al, bl)
  local hlh, hll = mul32(ah, bl)
  local lhh, lhl = mul32(al, bh)
  local hhh, hhl = mul32(ah, bh)
  local cross = hll + lhl + llh
  local r1 = cross % M32
  local upper = hhl + hlh + lhh + (cross - r1) / M32
  local r2 = upper % M32
  local r3 = (hhh + (upper - r2) / M32) % M32
  return bxor(r1, r3), bxor(lll, r2)
end

local function shr64(h, l, s)
  if s >= 32 then
    return 0, rshift(h, s - 32)
  end
  return rshift(h, s), bor(rshift(l, s), lshift(h, 32 - s))
end

local function xorshift64(h, l, s)
  local sh, sl = shr64(h, l, s)
  return bxor(h, sh), bxor(l, sl)
end

local function rotl64(h, l, r)
  if r >= 32 then
    h, l, r = l, h, r - 32
  end
  if r == 0 then
    return h, l
  end
  return bor(lshift(h, r), rshift(l, 32 - r)), bor(lshift(l, r), rshift(h, 32 - r))
end

local function bswap32(x)
  return bor(lshift(band(x, 0xff), 24), lshift(band(rshift(x, 8), 0xff), 16),
    lshift(band(rshift(x, 16), 0xff), 8), rshift(x, 24))
end

local function avalanche(h, l) -- XXH3_avalanche
  h, l = xorshift64(h, l, 37)
  h, l = mul64(h, l, MX1H, MX1L)
  local rh, rl = xorshift64(h, l, 32)
  return rh, rl
end

local function avalanche64(h, l) -- XXH64_avalanche
  h, l = xorshift64(h, l, 33)
  h, l = mul64(h, l, P64_2H, P64_2L)
  h, l = xorshift64(h, l, 29)
  h, l = mul64(h, l, P64_3H, P64_3L)
  local rh, rl = xorshift64(h, l, 32)
  return rh, rl
end

local function secret_xor(a, b) -- readLE64(secret + a) ^ readLE64(secret + b)
  local ah, al = le64(SECRET, a)
  local bh, bl = le64(SECRET, b)
  return bxor(ah, bh), bxor(al, bl)
end

local function len_1to3(s, n)
  local c1, c2, c3 = byte(s, 1), byte(s, math.floor(n / 2) + 1), byte(s, n)
  local combined = c1 * 65536 + c2 * 16777216 + c3 + n * 256
  local rh, rl = avalanche64(0, bxor(combined, bxor(le32(SECRET, 0), le32(SECRET, 4))))
  return rh, rl
end

local function len_4to8(s, n)
  local fh, fl = secret_xor(8, 16)
  local h, l = bxor(le32(s, 0), fh), bxor(le32(s, n - 4), fl)
  local r1h, r1l = rotl64(h, l, 49)
  local r2h, r2l = rotl64(h, l, 24)
  h, l = bxor(h, r1h, r2h), bxor(l, r1l, r2l)
  h, l = mul64(h, l, MX2H, MX2L)
  local sh, sl = shr64(h, l, 35)
  sh, sl = add64(sh, sl, 0, n)
  h, l = mul64(bxor(h, sh), bxor(l, sl), MX2H, MX2L)
  local rh, rl = xorshift64(h, l, 28)
  return rh, rl
end

local function len_9to16(s, n)
  local f1h, f1l = secret_xor(24, 32)
  local f2h, f2l = secret_xor(40, 48)
  local ih, il = le64(s, 0)
  local jh, jl = le64(s, n - 8)
  ih, il = bxor(ih, f1h), bxor(il, f1l)
  jh, jl = bxor(jh, f2h), bxor(jl, f2l)
  local h, l = add64(bswap32(il), bswap32(ih), jh, jl)
  h, l = add64(h, l, 0, n)
  h, l = add64(h, l, fold64(ih, il, jh, jl))
  local rh, rl = avalanche(h, l)
  return rh, rl
end

-- XXH3_mix16B: input s at p, secret at k, seed 0
local function mix16(s, p, k)
  local ah, al = le64(s, p)
  local bh, bl = le64(s, p + 8)
  local sh, sl = le64(SECRET, k)
  local th, tl = le64(SECRET, k + 8)
  local rh, rl = fold64(bxor(ah, sh), bxor(al, sl), bxor(bh, th), bxor(bl, tl))
  return rh, rl
end

local function len_17to128(s, n)
  local h, l = mul64(0, n, P64_1H, P64_1L)
  local pairs_ = math.floor((n - 1) / 32) -- rounds of two mixes beyond the first
  for i = pairs_, 0, -1 do
    h, l = add64(h, l, mix16(s, 16 * i, 32 * i))
    h, l = add64(h, l, mix16(s, n - 16 * (i + 1), 32 * i + 16))
  end
  local rh, rl = avalanche(h, l)
  return rh, rl
end

local function len_129to240(s, n)
  local h, l = mul64(0, n, P64_1H, P64_1L)
  for i = 0, 7 do
    h, l = add64(h, l, mix16(s, 16 * i, 16 * i))
  end
  h, l = avalanche(h, l)
  for i = 8, math.floor(n / 16) - 1 do
    h, l = add64(h, l, mix16(s, 16 * i, 16 * (i - 8) + 3))
  end
  h, l = add64(h, l, mix16(s, n - 16, 136 - 17))
  local rh, rl = avalanche(h, l)
  return rh, rl
end

-- the secret's u64 words at every byte offset a stripe reads (0, 8, ..., 184) and the last
-- stripe's (from SECRET_SIZE - 64 - 7), as halves: the long loop's keys
local KH, KL, LASTH, LASTL = {}, {}, {}, {}
for off = 0, SECRET_SIZE - 8, 8 do
  KH[off], KL[off] = le64(SECRET, off)
end
for i = 0, 7 do
  LASTH[8 * i], LASTL[8 * i] = le64(SECRET, SECRET_SIZE - STRIPE - 7 + 8 * i)
end

-- stripes of 64 bytes from 0-based input offset p into the accumulators (AL, AM, AH: the
-- lanes' lo, mid and hi parts, indexed 0..7), the i-th stripe keyed at koff + 8 * i (keyh,
-- keyl: word tables, or nil for the last stripe's own keys)
local function accumulate(A, s, p, nstripes, koff, keyh, keyl)
  local AL, AM, AH = A[1], A[2], A[3]
  for stripe = 0, nstripes - 1 do
    local q = p + stripe * STRIPE + 1
    local k = koff + stripe * 8
    for lane = 0, 7 do
      local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, q, q + 7)
      local vlo = b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
      local vhi = b5 + b6 * 256 + b7 * 65536 + b8 * 16777216
      local klo = bxor(vlo, keyl[k])
      local khi = bxor(vhi, keyh[k])
      local kh1 = khi % M16
      AL[lane] = AL[lane] + klo * kh1
      AM[lane] = AM[lane] + klo * ((khi - kh1) / M16)
      local other = lane + 1 - 2 * (lane % 2) -- lane ^ 1
      AL[other] = AL[other] + vlo
      AH[other] = AH[other] + vhi
      q = q + 8
      k = k + 8
    end
  end
end

-- the accumulators' pending carries folded in: each lane a plain (hi, lo) again
local function normalise(A)
  local AL, AM, AH = A[1], A[2], A[3]
  for lane = 0, 7 do
    local m = AM[lane]
    local mlo = m % M16
    local low = AL[lane] + mlo * M16
    local lo = low % M32
    AL[lane] = lo
    AM[lane] = 0
    AH[lane] = (AH[lane] + (m - mlo) / M16 + (low - lo) / M32) % M32
  end
end

local function scramble(A)
  local AL, AH = A[1], A[3]
  for lane = 0, 7 do
    local h, l = xorshift64(AH[lane], AL[lane], 47)
    local sh, sl = le64(SECRET, SECRET_SIZE - STRIPE + 8 * lane)
    h, l = bxor(h, sh), bxor(l, sl)
    local ph, pl = mul32(l, P32_1)
    AH[lane], AL[lane] = (ph + mullo32(h, P32_1)) % M32, pl
  end
end

local function merge(A, n)
  local AL, AH = A[1], A[3]
  local h, l = mul64(0, n, P64_1H, P64_1L)
  for i = 0, 3 do
    local sh, sl = le64(SECRET, 11 + 16 * i)
    local th, tl = le64(SECRET, 11 + 16 * i + 8)
    local a, b = 2 * i, 2 * i + 1
    h, l = add64(h, l, fold64(bxor(AH[a], sh), bxor(AL[a], sl), bxor(AH[b], th), bxor(AL[b], tl)))
  end
  local rh, rl = avalanche(h, l)
  return rh, rl
end

local function hash_long(s, n)
  local init = {
    { 0, P32_3 }, { P64_1H, P64_1L }, { P64_2H, P64_2L }, { P64_3H, P64_3L },
    { P64_4H, P64_4L }, { 0, P32_2 }, { P64_5H, P64_5L }, { 0, P32_1 },
  }
  local A = { {}, {}, {} }
  for lane = 0, 7 do
    A[3][lane], A[1][lane], A[2][lane] = init[lane + 1][1], init[lane + 1][2], 0
  end
  local blocks = math.floor((n - 1) / BLOCK)
  for b = 0, blocks - 1 do
    accumulate(A, s, b * BLOCK, STRIPES_PER_BLOCK, 0, KH, KL)
    normalise(A)
    scramble(A)
  end
  local stripes = math.floor(((n - 1) - BLOCK * blocks) / STRIPE)
  accumulate(A, s, blocks * BLOCK, stripes, 0, KH, KL)
  normalise(A)
  accumulate(A, s, n - STRIPE, 1, 0, LASTH, LASTL)
  normalise(A)
  local rh, rl = merge(A, n)
  return rh, rl
end

-- XXH3_64bits(s): hi, lo
local function xxh3_64(s)
  local n = #s
  local h, l
  if n == 0 then
    h, l = avalanche64(secret_xor(56, 64))
  elseif n <= 3 then
    h, l = len_1to3(s, n)
  elseif n <= 8 then
    h, l = len_4to8(s, n)
  elseif n <= 16 then
    h, l = len_9to16(s, n)
  elseif n <= 128 then
    h, l = len_17to128(s, n)
  elseif n <= 240 then
    h, l = len_129to240(s, n)
  else
    h, l = hash_long(s, n)
  end
  return h, l
end

return { xxh3_64 = xxh3_64 }
