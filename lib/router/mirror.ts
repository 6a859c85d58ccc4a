// RequestMirror (Gateway API HTTPRoute filter): a copy of the request goes to
// each mirror backend, fire-and-forget; the mirror's answer, pace and failures
// never touch the client's exchange.
//
// The body is teed with a bound: the main request reads it through a Transform
// that passes every chunk on at once (the client's pace is the main upstream's,
// never the mirror's) and keeps a copy of the first MIRROR_BODY_LIMIT bytes.
// When the body ends within the bound, the mirrors get it whole, with its
// content-length. A larger body drops the mirror copies (a truncated body would
// be a different request), as does a body that fails or is abandoned.
//
// A mirror gets the request as it was before any backend's extension chain:
// what a chain adds (a credential) is for that backend alone.

import { PassThrough, Transform, pipeline, type Readable, type TransformCallback } from 'node:stream'
import type { Cluster, Mirror } from '../compile/table.ts'
import type { OutgoingHeaders, UpstreamHandler, UpstreamRequest, UpstreamResponse, UpstreamTunnel, Upstreams } from '../upstream/types.ts'
import { logger } from '../observe/log.ts'

/** Request body bytes buffered for mirrors; a longer body is not mirrored. */
export const MIRROR_BODY_LIMIT = 64 * 1024

const MIRROR_TIMEOUT_MS = 30_000

const log = logger('mirror')

const MIRROR_HANDLER: UpstreamHandler = {
  // Read and dropped (a body that breaks off errors into ResponseBody's own no-op listener).
  onResponse(res: UpstreamResponse): void { res.body.resume() },
  onTunnel(tunnel: UpstreamTunnel): void { tunnel.stream.destroy() },
  onError(): void {},
}

/**
 * Sends the mirror copies of `req` (those the percentages pick) and returns the
 * request to forward: `req` itself, or, when it has a body and a mirror was
 * picked, a copy whose body is the tee.
 */
export function mirrorRequest(mirrors: readonly Mirror[], clusters: ReadonlyMap<string, Cluster>, upstreams: Upstreams, req: UpstreamRequest): UpstreamRequest {
  const picked: Cluster[] = []
  for (let i = 0; i < mirrors.length; i++) {
    const m = mirrors[i]
    if (m.cluster === null) continue
    if (m.percent < 100 && Math.random() * 100 >= m.percent) continue
    const cluster = clusters.get(m.cluster)
    if (cluster !== undefined) picked.push(cluster)
  }
  if (picked.length === 0) return req
  const body = req.body
  if (body === null) {
    send(picked, upstreams, req, null)
    return req
  }
  // The copies go out when the body ends, after the backend's extension chain
  // has run on `req` (a CredentialInjector writes its key into req.headers):
  // they are sent from the request as it is now, before any chain.
  const before: UpstreamRequest = { ...req, headers: { ...req.headers } }
  const tee = new MirrorTee((copy) => send(picked, upstreams, before, copy))
  // The main consumer may destroy the tee (upstream failure): the client's body goes with it.
  pipeline(body, tee, noop)
  return { ...req, body: tee }
}

function send(clusters: readonly Cluster[], upstreams: Upstreams, req: UpstreamRequest, body: Buffer | null): void {
  for (const cluster of clusters) {
    const headers: OutgoingHeaders = { ...req.headers }
    delete headers['transfer-encoding']
    if (body === null) delete headers['content-length']
    else headers['content-length'] = String(body.length)
    upstreams.forward({
      cluster, method: req.method, path: req.path, authority: cluster.hostname ?? req.authority,
      headers, body: body === null || body.length === 0 ? null : new PassThrough().end(body) as Readable,
      timeouts: req.timeouts, signal: AbortSignal.timeout(MIRROR_TIMEOUT_MS),
      upgrade: null, clientAddress: req.clientAddress,
    }, MIRROR_HANDLER)
  }
}

/** Passes chunks through untouched; keeps a copy of up to MIRROR_BODY_LIMIT bytes for the mirrors. */
class MirrorTee extends Transform {
  readonly #onComplete: (copy: Buffer) => void
  #chunks: Buffer[] | null = []
  #size = 0

  constructor(onComplete: (copy: Buffer) => void) {
    super()
    this.#onComplete = onComplete
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const chunks = this.#chunks
    if (chunks !== null) {
      this.#size += chunk.length
      if (this.#size > MIRROR_BODY_LIMIT) {
        this.#chunks = null
        log.debug({ limit: MIRROR_BODY_LIMIT }, 'request body over the mirror bound: not mirrored')
      } else {
        chunks.push(chunk)
      }
    }
    callback(null, chunk)
  }

  override _flush(callback: TransformCallback): void {
    const chunks = this.#chunks
    this.#chunks = null
    if (chunks !== null) this.#onComplete(Buffer.concat(chunks, this.#size))
    callback()
  }
}

function noop(): void {}
