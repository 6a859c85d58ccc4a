// Distributed tracing of proxied traffic (issue 10): a SERVER span per
// downstream request, a CLIENT span per upstream attempt (retries and failover
// are separate spans, numbered), a SERVER span per TCP/TLS connection;
// exported over OTLP/HTTP (otlp-exporter.ts). Off by default: `tracer` stays
// null and the request path pays one null check.
//
// Why not the OpenTelemetry JS SDK (@opentelemetry/sdk-trace + api +
// exporter-trace-otlp-*): it is well kept, but per span it builds a Span with
// an attribute Map, a SpanContext, hrtime tuples, runs the sampler and the
// span processor chain, and needs a context manager (AsyncLocalStorage) to
// find parents — measured at about 6x our recorder's CPU per request-pair of
// spans (bench numbers in the commit that added this file). Here the parent is
// the request context object itself, so none of that is needed; what we keep
// from OpenTelemetry is its wire format (OTLP), its sampler semantics
// (ParentBased(TraceIdRatioBased)), its semantic conventions and its BSP_*
// batching knobs.
//
// Propagation (trace-context.ts): a valid traceparent (+ tracestate), else B3
// single, else B3 multi, is the parent. Upstream requests carry a traceparent
// whose parent id is the client span of that attempt, and the tracestate as
// received. B3 headers the client sent are rewritten to the same ids (trace,
// client span, server span as parent, sampled) so B3-only upstreams see the
// same tree; they are never added when absent. Unsampled requests: a request
// that arrived with a context goes on untouched; a new (root) one gets a
// traceparent with sampled=0 so the upstream honours our decision.

import os from 'node:os'
import type { IncomingHttpHeaders } from 'node:http'
import type { ClientIdentity, Cluster, PortEntry, RouteRule } from '../compile/table.ts'
import type { SallyportError } from '../errors.ts'
import type { Exchange } from '../router/exchange.ts'
import type {
  L4DialCallback, L4DialRequest, OutgoingHeaders, PendingDial, ResilienceView, UpstreamHandler, UpstreamRequest, UpstreamResponse, UpstreamTunnel, Upstreams,
} from '../upstream/types.ts'
import { extractContext, formatTraceparent, newSpanId, newTraceId } from './trace-context.ts'
import { SpanKind, SpanRecord, epochMs, nowMs, type AttributeValue } from './tracing-span.ts'
import { OtlpExporter, type OtlpProtocol } from './otlp-exporter.ts'
import { gatewayOf, servingListener } from './serving-listener.ts'

export interface TracingOptions {
  readonly endpoint: URL
  readonly protocol: OtlpProtocol
  /** Ratio of new (root) traces sampled, 0..1; parents' decisions are kept. */
  readonly sampling: number
  readonly maxQueue?: number
  readonly maxBatch?: number
  readonly delayMs?: number
  readonly timeoutMs?: number
  /** Resource service.name (OTEL_SERVICE_NAME); default 'sallyport'. */
  readonly serviceName?: string
  readonly serviceVersion?: string
  /** Extra resource attributes (OTEL_RESOURCE_ATTRIBUTES), flat [k, v, …]. */
  readonly resource?: ReadonlyArray<AttributeValue>
}

/** The process's tracer; null when tracing is off (the request path checks only this). */
export let tracer: Tracer | null = null

/** Start tracing for this process (serve / each worker). */
export function installTracer(options: TracingOptions): Tracer {
  tracer = new Tracer(options)
  return tracer
}

/** Flush and stop; afterwards the request path sees null again. */
export async function shutdownTracer(timeoutMs = 5000): Promise<void> {
  const t = tracer
  tracer = null
  if (t !== null) await t.shutdown(timeoutMs)
}

const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'CONNECT', 'OPTIONS', 'TRACE', 'PATCH'])
const TWO_32 = 0x1_0000_0000

export class Tracer {
  readonly exporter: OtlpExporter
  /** Root traces whose last 32 trace-id bits are below this are sampled. */
  readonly #threshold: number

  constructor(options: TracingOptions) {
    const ratio = Math.min(1, Math.max(0, options.sampling))
    this.#threshold = ratio * TWO_32
    const resource: AttributeValue[] = [
      'service.name', options.serviceName ?? 'sallyport',
      'service.version', options.serviceVersion ?? '',
      'service.instance.id', `${os.hostname()}/${process.pid}`,
      'host.name', os.hostname(),
      'process.pid', process.pid,
      ...(options.resource ?? []),
    ]
    // A batch is at most the queue (the SDKs' BatchSpanProcessor clamps it so): a queue set
    // below the default batch alone would never fill one, and drop spans while it waits.
    const maxQueue = options.maxQueue ?? 2048
    this.exporter = new OtlpExporter({
      endpoint: options.endpoint, protocol: options.protocol,
      maxQueue, maxBatch: Math.min(options.maxBatch ?? 512, maxQueue),
      delayMs: options.delayMs ?? 5000, timeoutMs: options.timeoutMs ?? 10_000,
      scope: { resource: resourceValues(resource), scopeName: 'sallyport', scopeVersion: options.serviceVersion ?? '' },
    })
  }

  /**
   * TraceIdRatioBased for roots: the W3C level 2 "random" trace-id bits are
   * the rightmost ones, so the last 8 hex digits decide — the same trace id
   * gets the same answer in every sallyport process.
   */
  sampleRoot(traceId: string): boolean {
    if (this.#threshold >= TWO_32) return true
    if (this.#threshold <= 0) return false
    return parseInt(traceId.slice(24, 32), 16) < this.#threshold
  }

  // hot path (tracing on)
  /** The trace of one downstream request; null when it is not recorded and needs nothing injected. */
  startRequest(headers: IncomingHttpHeaders): RequestTrace | null {
    const parent = extractContext(headers)
    if (parent === null || parent.traceId === '') {
      // A root (or a lone B3 "0": a root we must not record).
      const traceId = newTraceId()
      const sampled = parent === null ? this.sampleRoot(traceId) : false
      return new RequestTrace(this, traceId, '', false, '', sampled, headers)
    }
    const sampled = parent.sampled ?? this.sampleRoot(parent.traceId)
    // An unsampled request with a context: its headers already say everything.
    if (!sampled) return null
    return new RequestTrace(this, parent.traceId, parent.spanId, true, parent.traceState, true, headers)
  }

  /** A finished span goes to the export queue (or is counted as dropped). */
  finished(span: SpanRecord): void {
    this.exporter.push(span)
  }

  /** One span per TCP/TLS listener connection (no headers: always a root trace). */
  recordConnection(c: ConnectionFacts): void {
    const traceId = newTraceId()
    if (!this.sampleRoot(traceId)) return
    const span = new SpanRecord(traceId, newSpanId(), '', false, '', SpanKind.SERVER, c.protocol === 'tls' ? 'tls connection' : c.protocol === 'connect' ? 'connect tunnel' : 'tcp connection', epochMs(c.startedAt))
    span.set('network.transport', 'tcp')
    span.set('client.address', c.client)
    span.set('server.port', c.port)
    if (c.sni !== null) span.set('tls.server.name', c.sni)
    span.set('sallyport.gateway', c.gateway)
    span.set('sallyport.listener', c.listener)
    span.set('sallyport.route', c.route)
    span.set('sallyport.backend', c.backend)
    if (c.endpoint !== '') setEndpoint(span, c.endpoint)
    span.set('sallyport.bytes_in', c.bytesIn)
    span.set('sallyport.bytes_out', c.bytesOut)
    if (c.code !== 'ok') span.error(c.code)
    span.endMs = nowMs()
    this.finished(span)
  }

  shutdown(timeoutMs: number): Promise<void> {
    return this.exporter.shutdown(timeoutMs)
  }
}

/** What recordConnection reads of an L4 session when it ends (lib/listeners/tcp-session.ts). */
export interface ConnectionFacts {
  /** performance.now() when the connection was accepted. */
  readonly startedAt: number
  /** 'connect': an HTTP CONNECT tunnel of forward-proxy mode (lib/listeners/connect-tunnel.ts). */
  readonly protocol: 'tcp' | 'tls' | 'connect'
  readonly gateway: string
  readonly listener: string
  readonly port: number
  readonly client: string
  readonly sni: string | null
  readonly route: string
  readonly backend: string
  readonly endpoint: string
  readonly bytesIn: number
  readonly bytesOut: number
  /** 'ok' or the L4 error reason (sallyport_l4_errors_total{reason}). */
  readonly code: string
}

function resourceValues(flat: readonly AttributeValue[]): AttributeValue[] {
  const out: AttributeValue[] = []
  for (let i = 0; i + 1 < flat.length; i += 2) if (flat[i + 1] !== '') out.push(flat[i], flat[i + 1])
  return out
}

/** `host:port`, `[v6]:port` or `unix:/path` → server.address / server.port. */
function setEndpoint(span: SpanRecord, endpoint: string): void {
  const colon = endpoint.lastIndexOf(':')
  if (endpoint.startsWith('unix:') || colon === -1) { span.set('server.address', endpoint); return }
  let host = endpoint.slice(0, colon)
  if (host.charCodeAt(0) === 91 /* [ */) host = host.slice(1, -1)
  span.set('server.address', host)
  const port = Number(endpoint.slice(colon + 1))
  if (Number.isInteger(port)) span.set('server.port', port)
}

/** What the server span reads of the request context when it ends (lib/router/forward.ts RequestContext). */
export interface ServedRequest {
  readonly ex: Exchange
  readonly method: string
  readonly path: string
  readonly host: string
  readonly authority: string
  readonly status: number
  readonly code: string | null
  readonly entry: PortEntry | null
  readonly rule: RouteRule | null
  readonly cluster: Cluster | null
  identity(): ClientIdentity | null
}

/**
 * The trace of one downstream request: its server span, and an Upstreams
 * stand-in (forward() opens a client span per call) handed to the attempt
 * loop, so every retry and failover is its own span without the loop knowing.
 */
export class RequestTrace implements Upstreams {
  readonly tracer: Tracer
  readonly traceId: string
  readonly sampled: boolean
  /** The server span; null when not recorded. */
  readonly span: SpanRecord | null
  /** Our span id toward upstreams (the server span's, or a fresh one when not recorded). */
  readonly spanId: string
  readonly traceState: string
  readonly #headers: IncomingHttpHeaders
  #upstreams: Upstreams | null = null
  #attempts = 0
  #open: ClientSpan[] | null = null

  constructor(tracer: Tracer, traceId: string, parentSpanId: string, remote: boolean, traceState: string, sampled: boolean, headers: IncomingHttpHeaders) {
    this.tracer = tracer
    this.traceId = traceId
    this.sampled = sampled
    this.spanId = newSpanId()
    this.traceState = traceState
    this.#headers = headers
    this.span = sampled ? new SpanRecord(traceId, this.spanId, parentSpanId, remote, traceState, SpanKind.SERVER, 'HTTP', nowMs()) : null
  }

  /** The Upstreams to dispatch through for this request. */
  upstreams(real: Upstreams): Upstreams {
    this.#upstreams = real
    return this
  }

  // ── Upstreams ──

  get resilience(): ResilienceView | undefined { return (this.#upstreams as Upstreams).resilience }

  // hot path (tracing on)
  forward(req: UpstreamRequest, handler: UpstreamHandler): void {
    const real = this.#upstreams as Upstreams
    const attempt = this.#attempts++
    if (!this.sampled) {
      // Not recorded: carry our decision (sampled=0) so the upstream does not start its own trace.
      // Every attempt (a retry may start again from a copy of the client's headers), and without
      // the client's tracestate: it belonged to the traceparent that was ignored (W3C §3.3).
      const headers = req.headers as OutgoingHeaders
      headers.traceparent = formatTraceparent(this.traceId, this.spanId, false)
      if (headers.tracestate !== undefined) delete headers.tracestate
      return real.forward(req, handler)
    }
    const client = new ClientSpan(this, req, handler, attempt)
    ;(this.#open ??= []).push(client)
    real.forward({ ...req, headers: this.#inject(req.headers, client.span.spanId) }, client)
  }

  dialL4(req: L4DialRequest, callback: L4DialCallback): PendingDial { return (this.#upstreams as Upstreams).dialL4(req, callback) }
  retain(): void {}
  stats(): ReturnType<Upstreams['stats']> { return (this.#upstreams as Upstreams).stats() }
  close(): Promise<void> { return Promise.resolve() }

  /** The attempt's headers: traceparent with the client span as parent, tracestate as received, client B3 rewritten. */
  #inject(base: OutgoingHeaders, clientSpanId: string): OutgoingHeaders {
    const headers: OutgoingHeaders = { ...base, traceparent: formatTraceparent(this.traceId, clientSpanId, true) }
    if (this.traceState !== '') headers.tracestate = this.traceState
    else delete headers.tracestate // an invalid one is not passed on
    const h = this.#headers
    if (h.b3 !== undefined) headers.b3 = `${this.traceId}-${clientSpanId}-1-${this.spanId}`
    if (h['x-b3-traceid'] !== undefined || h['x-b3-spanid'] !== undefined) {
      headers['x-b3-traceid'] = this.traceId
      headers['x-b3-spanid'] = clientSpanId
      headers['x-b3-parentspanid'] = this.spanId
      headers['x-b3-sampled'] = '1'
      delete headers['x-b3-flags']
    }
    return headers
  }

  closed(client: ClientSpan): void {
    const open = this.#open
    if (open === null) return
    const i = open.indexOf(client)
    if (i !== -1) open.splice(i, 1)
  }

  /** The downstream side is over: attributes from the request context, then export. */
  end(ctx: ServedRequest): void {
    const span = this.span
    if (span === null) return
    const open = this.#open
    if (open !== null) for (const c of [...open]) c.finish()
    const ex = ctx.ex
    const method = KNOWN_METHODS.has(ctx.method) ? ctx.method : '_OTHER'
    span.name = method
    span.set('http.request.method', method)
    if (method === '_OTHER') span.set('http.request.method_original', ctx.method)
    span.set('url.path', ctx.path)
    span.set('url.scheme', ex.scheme)
    span.set('server.address', ctx.host)
    const colon = ctx.authority.lastIndexOf(':')
    const port = colon > ctx.authority.lastIndexOf(']') ? Number(ctx.authority.slice(colon + 1)) : ex.port
    span.set('server.port', Number.isInteger(port) ? port : ex.port)
    span.set('network.protocol.version', ex.protocol === 'h2' ? '2' : '1.1')
    span.set('client.address', ex.clientAddress)
    const ua = ex.headers['user-agent']
    if (ua !== undefined) span.set('user_agent.original', ua)
    if (ctx.status > 0) span.set('http.response.status_code', ctx.status)
    const rule = ctx.rule
    const gateway = gatewayOf(ctx.entry, servingListener(ctx.entry, ctx.host))
    if (gateway !== '') span.set('sallyport.gateway', gateway)
    if (rule !== null) span.set('sallyport.route', rule.route.namespace + '/' + rule.route.name)
    if (ctx.cluster !== null) span.set('sallyport.backend', ctx.cluster.id)
    const client = ctx.identity()
    if (client !== null) {
      span.set('sallyport.client.namespace', client.namespace)
      span.set('sallyport.client.service_account', client.serviceAccount)
    }
    span.set('sallyport.attempts', this.#attempts)
    // Semantic conventions: a server span is an error on 5xx (or no answer at all), not on 4xx.
    if (ctx.status >= 500 || (ctx.status === 0 && ctx.code !== null)) span.error(ctx.code ?? String(ctx.status))
    else if (ctx.code !== null) span.set('error.type', ctx.code)
    span.endMs = nowMs()
    this.tracer.finished(span)
  }
}

/** One upstream attempt: a CLIENT span wrapping the attempt's handler. */
class ClientSpan implements UpstreamHandler {
  readonly span: SpanRecord
  readonly #trace: RequestTrace
  readonly #inner: UpstreamHandler
  #done = false

  constructor(trace: RequestTrace, req: UpstreamRequest, inner: UpstreamHandler, attempt: number) {
    this.#trace = trace
    this.#inner = inner
    const method = KNOWN_METHODS.has(req.method) ? req.method : '_OTHER'
    const span = new SpanRecord(trace.traceId, newSpanId(), trace.spanId, false, trace.traceState, SpanKind.CLIENT, method, nowMs())
    this.span = span
    span.set('http.request.method', method)
    const cluster = req.cluster
    const scheme = cluster.tls === null ? 'http' : 'https'
    const q = req.path.indexOf('?')
    // url.full without the query: queries often carry credentials (semantic conventions allow redaction).
    span.set('url.full', scheme + '://' + req.authority + (q === -1 ? req.path : req.path.slice(0, q)))
    span.set('sallyport.backend', cluster.id)
    span.set('sallyport.attempt', attempt + 1)
    if (attempt > 0) span.set('http.request.resend_count', attempt)
  }

  onResponse(res: UpstreamResponse): void {
    const span = this.span
    setEndpoint(span, res.endpoint)
    span.set('network.protocol.version', res.protocol === 'h1' ? '1.1' : '2')
    span.set('http.response.status_code', res.status)
    // Client spans: 4xx and 5xx are errors (HTTP semantic conventions, span status).
    if (res.status >= 400) span.error(String(res.status))
    res.body.once('close', () => this.finish())
    this.#inner.onResponse(res)
  }

  onInformational(status: number, headers: OutgoingHeaders): void {
    this.#inner.onInformational?.(status, headers)
  }

  onTunnel(tunnel: UpstreamTunnel): void {
    setEndpoint(this.span, tunnel.endpoint)
    this.span.set('http.response.status_code', tunnel.status)
    tunnel.stream.once('close', () => this.finish())
    this.#inner.onTunnel(tunnel)
  }

  onError(err: SallyportError): void {
    this.span.error(err.code, err.detail ?? '')
    this.finish()
    this.#inner.onError(err)
  }

  finish(): void {
    if (this.#done) return
    this.#done = true
    this.span.endMs = nowMs()
    this.#trace.closed(this)
    this.#trace.tracer.finished(this.span)
  }
}
