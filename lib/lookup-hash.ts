// String hashes of the route lookup index, shared by compile (which builds the
// index, lib/compile/lookup-index.ts) and the router (which probes it,
// lib/router/match.ts): both sides must compute the same numbers, so they live
// here, below both layers. FNV-1a over UTF-16 code units: a multiply and a xor
// per char, no allocation, and it runs incrementally, so the router gets the
// hash of every path prefix ending at a '/' (and of every host suffix starting
// at a '.') from one pass over the string. A slot keeps the full 32-bit hash;
// a hit is confirmed by comparing the stored key, so collisions cost a
// comparison, never a wrong answer.

export const FNV_OFFSET = 0x811c9dc5 | 0
export const FNV_PRIME = 0x01000193

/** FNV-1a over `s` from the first char to the last. Path keys ('/foo', the exact path). */
export function pathHash(s: string): number {
  let h = FNV_OFFSET
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME)
  return h
}

/**
 * FNV-1a over `s` from the last char to the first. Host keys: the hash of a
 * suffix ('.example.com' of 'a.example.com') is a step of the same pass.
 */
export function hostHash(s: string): number {
  let h = FNV_OFFSET
  for (let i = s.length - 1; i >= 0; i--) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME)
  return h
}

/** Key kinds, mixed into the slot hash and kept in the slot's tag. */
export const KIND_EXACT = 0
export const KIND_PREFIX = 1
export const KIND_WILDCARD = 1

/**
 * The slot hash: a key hash mixed with its owner (the vhost's key hash for a
 * path, 0 for a host) and kind, through murmur3's finalizer so the low bits
 * that pick the slot depend on every input bit. Never 0 (0 marks an empty slot).
 */
export function slotHash(owner: number, key: number, kind: number): number {
  let h = (Math.imul(owner, 0x9e3779b1) ^ key) + kind | 0
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h === 0 ? 1 : h
}

// Layout of the index (lib/compile/table.ts LookupIndex). Each table is one
// plain array, 5 elements a slot: [stored hash, tag, key, value, first]. The
// stored hash is the slot hash's low 30 bits (a small integer in every V8
// build, so the array holds no boxed numbers; 0 marks an empty slot); tag is
// owner vhost id << 1 | kind; key is the key string (compared with the request
// in place). For a path slot, value is the head word of the key's match list
// (packHead: the first match's rank, whether it fits every request and whether
// it ends the lookup when it does) and first is that RouteMatch (the rest of
// the list follows it in `matches`, from `pathLists[slot]`); for a host slot,
// value is the vhost's packed info (packInfo; -1 when it does not fit, then
// vhostInfo has it) and first is 0. One slot read gives the hash, the key,
// what ranking needs and the answer, so a hit on a match without conditions
// reads nothing else but the key: on a 10,000-route table, every other object
// is one more cache and TLB miss (bench/compile.ts).
// Per vhost, `vhostInfo` holds 4 int32 words: [key hash, root prefix list
// (-1: none), deepest prefix in segments, flags].
export const SLOT_WORDS = 5
export const INFO_WORDS = 4
export const FLAG_EXACT = 1
export const FLAG_REGEX = 2
export const FLAG_QUERY = 4

/** Root list + 1 (23 bits), deepest prefix (4 bits), flags (3 bits) in one small integer; -1 when out of range. */
export function packInfo(root: number, depth: number, flags: number): number {
  return root + 1 < 1 << 23 && depth < 16 ? (root + 1) << 7 | depth << 3 | flags : -1
}

/**
 * A path slot's head word: the rank of its list's first match (< 2^28) << 2,
 * HEAD_FINAL when that match, if it fits, is the answer (nothing else of the
 * vhost ranks before it), HEAD_FITS_ALL when it has no condition. The rank is
 * the list's best, so a slot whose rank cannot beat the best so far is skipped.
 */
export function packHead(rank: number, fitsAll: boolean, final: boolean): number {
  if (rank >= 1 << 28) throw new RangeError(`rank ${rank} does not fit a head word`)
  return rank << 2 | (final ? HEAD_FINAL : 0) | (fitsAll ? HEAD_FITS_ALL : 0)
}
export const HEAD_FITS_ALL = 1
export const HEAD_FINAL = 2

/** What a slot stores of a slot hash. */
export function storedHash(slot: number): number {
  return (slot & 0x3fffffff) || 1
}
