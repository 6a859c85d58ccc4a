// RequestMirror (Gateway API HTTPRoute filter): a copy of the request goes to
// each mirror backend, fire-and-forget; the mirror's answer, pace and failures
// never touch the client's exchange.
//
// The copies wait for two things: the body (when there is one), and the go of
// the backend's extension chain (release(), once the request-phase hooks let
// the request through toward the upstream). A request the chain refuses (an
// Authorization 403, a RateLimit 429, a PayloadProcessor deny of the body it
// read, a failing extension's 500) is never mirrored; one it lets through is
// mirrored once, whatever retries and failover follow.
//
// The body is teed with a bound: the main request reads it through a Transform
// that passes every chunk on at once (the client's pace is the main upstream's,
// never the mirror's) and keeps a copy of the first MIRROR_BODY_LIMIT bytes.
// When the body ends within the bound, the mirrors get it whole, with its
// content-length. A larger body drops the mirror copies (a truncated body would
// be a different request), as does a body that fails or is abandoned.
//
// A mirror gets the request as it was before any backend's extension chain:
// what a chain adds (a credential) or changes is for that backend alone.

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
 * The mirror copies of `req` (those the percentages pick), or null when none
 * was picked. Its `request` is the one to forward: `req` itself, or, when it
 * has a body, a copy whose body is the tee. Nothing is sent before release().
 */
export function mirrorRequest(mirrors: readonly Mirror[], clusters: ReadonlyMap<string, Cluster>, upstreams: Upstreams, req: UpstreamRequest): MirrorCopies | null {
  let picked: Cluster[] | null = null
  for (let i = 0; i < mirrors.length; i++) {
    const m = mirrors[i]
    if (m.cluster === null) continue
    if (m.percent < 100 && Math.random() * 100 >= m.percent) continue
    const cluster = clusters.get(m.cluster)
    if (cluster !== undefined) (picked ??= []).push(cluster)
  }
  if (picked === null) return null
  return new MirrorCopies(picked, upstreams, req)
}

const PENDING = 0
const READY = 1
const DROPPED = 2

export class MirrorCopies {
  /** The request to forward (its body, if any, is the tee). */
  readonly request: UpstreamRequest
  readonly #clusters: readonly Cluster[]
  readonly #upstreams: Upstreams
  /**
   * The request as it is now, before any chain: the chain runs on `request`
   * and may change its headers in place (a CredentialInjector writes its key).
   */
  readonly #before: UpstreamRequest
  #body: Buffer | null = null
  #state: typeof PENDING | typeof READY | typeof DROPPED
  #released = false

  constructor(clusters: readonly Cluster[], upstreams: Upstreams, req: UpstreamRequest) {
    this.#clusters = clusters
    this.#upstreams = upstreams
    this.#before = { ...req, headers: { ...req.headers } }
    const body = req.body
    if (body === null) {
      this.#state = READY
      this.request = req
      return
    }
    this.#state = PENDING
    const tee = new MirrorTee(this)
    // The main consumer may destroy the tee (upstream failure): the client's body goes with it.
    pipeline(body, tee, noop)
    this.request = { ...req, body: tee }
  }

  /** The backend's request-phase chain let the request through (or it has none): the copies may go. */
  release(): void {
    if (this.#released) return
    this.#released = true
    if (this.#state === READY) this.#send()
  }

  /** The whole body, within the bound. */
  complete(copy: Buffer): void {
    if (this.#state !== PENDING) return
    this.#state = READY
    this.#body = copy
    if (this.#released) this.#send()
  }

  /** Over the bound: no copy goes. */
  drop(): void {
    this.#state = DROPPED
  }

  #send(): void {
    this.#state = DROPPED // once
    const req = this.#before
    const body = this.#body
    this.#body = null
    for (const cluster of this.#clusters) {
      const headers: OutgoingHeaders = { ...req.headers }
      delete headers['transfer-encoding']
      if (body === null) delete headers['content-length']
      else headers['content-length'] = String(body.length)
      this.#upstreams.forward({
        cluster, method: req.method, path: req.path, authority: cluster.hostname ?? req.authority,
        headers, body: body === null || body.length === 0 ? null : new PassThrough().end(body) as Readable,
        timeouts: req.timeouts, signal: AbortSignal.timeout(MIRROR_TIMEOUT_MS),
        upgrade: null, clientAddress: req.clientAddress,
      }, MIRROR_HANDLER)
    }
  }
}

/** Passes chunks through untouched; keeps a copy of up to MIRROR_BODY_LIMIT bytes for the mirrors. */
class MirrorTee extends Transform {
  readonly #copies: MirrorCopies
  #chunks: Buffer[] | null = []
  #size = 0

  constructor(copies: MirrorCopies) {
    super()
    this.#copies = copies
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const chunks = this.#chunks
    if (chunks !== null) {
      this.#size += chunk.length
      if (this.#size > MIRROR_BODY_LIMIT) {
        this.#chunks = null
        this.#copies.drop()
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
    if (chunks !== null) this.#copies.complete(Buffer.concat(chunks, this.#size))
    callback()
  }
}

function noop(): void {}
