// Calls the addon (its path the first argument) in a loop: ROUNDS buffers of runs and noise packed
// and unpacked through its malloc'd scratch space, each round checked; prints the totals and a hash.
const crypto = require('crypto');
const addon = require(process.argv[2]);
const rounds = Number(process.argv[3] || 2000);
let seed = 12345, packed = 0, raw = 0;
const h = crypto.createHash('sha256');
for (let r = 0; r < rounds; r++) {
  const size = 256 + (r * 7919) % 40000;
  const b = Buffer.alloc(size);
  for (let i = 0; i < size; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    b[i] = (i >> (4 + r % 5)) & 0xff ^ (seed >>> 29);
  }
  const p = addon.pack(b);
  const u = addon.unpack(p);
  if (!u.equals(b)) throw new Error(`round ${r}: unpack(pack(b)) differs`);
  packed += p.length; raw += size;
  h.update(p);
}
console.log(rounds, raw, packed, h.digest('hex').slice(0, 16));
