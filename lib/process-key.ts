// A key made at random once per process (each worker has its own), for
// digests that must tell values apart within the process yet reveal nothing
// testable about them to whoever sees the digest: an HMAC of a Secret value
// under it cannot be checked against guesses, as a plain hash can. Never
// persisted, logged or sent; a digest under it means nothing in another
// process or after a restart.
import { randomBytes } from 'node:crypto'

export const PROCESS_KEY: Buffer = randomBytes(32)
