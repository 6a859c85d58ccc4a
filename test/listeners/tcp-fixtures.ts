// Scaffolding for the TCP/TLS listener tests: hand-built L4 tables, upstream
// servers (echo, half-close answerer, TLS), clients that collect what they
// receive. Loopback only; every wait is bounded.

import { createHash } from 'node:crypto'
import net, { type AddressInfo } from 'node:net'
import tls from 'node:tls'
import type { Test } from 'tap'
import type { Cluster, ClusterTls, L4Route, PortEntry, RouteTable, ServerTls, SniIndex, WeightedCluster } from '../../lib/compile/table.ts'
import { buildHostnameIndex } from '../../lib/hostname-index.ts'
import { createDataPlane, type DataPlane, type DataPlaneOptions } from '../../lib/listeners/data-plane.ts'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import type { Upstreams } from '../../lib/upstream/types.ts'
import { freePort } from '../helpers/table-builder.ts'

export { freePort }

export function l4Cluster(id: string, ports: readonly number[], over: Partial<Cluster> = {}): Cluster {
  return {
    id, kind: 'Service', namespace: 'test', name: id, port: ports[0] ?? 0, protocol: 'TCP', hostname: null,
    endpoints: ports.map((port) => ({ host: '127.0.0.1', port, kind: 'ip' as const, weight: 1, zone: null })),
    tls: null, mcpPath: null, extensions: null, lb: null, circuitBreaker: null, healthCheck: null,
    fallback: false, region: null, enableIPv6: false, ...over,
  }
}

export function clusterTls(over: Partial<ClusterTls> = {}): ClusterTls {
  const base: ClusterTls = {
    servername: 'upstream.test', verifyHostname: 'upstream.test', caPem: null, subjectAltNames: [], certPem: null, keyPem: null,
    insecureSkipVerify: false, spkiPins: [], crlPem: null, minVersion: 'TLSv1.2', alpn: [],
    crlStale: 'fail', crlFetch: false, ocsp: 'allow', verifyName: true, identityHash: '',
  }
  const merged = { ...base, ...over }
  return { ...merged, identityHash: createHash('sha256').update(JSON.stringify(merged)).digest('hex') }
}

export function l4Route(name: string, backends: ReadonlyArray<Partial<WeightedCluster> & { cluster: string | null }>, over: Partial<L4Route> = {}): L4Route {
  const list: WeightedCluster[] = backends.map((b) => ({ weight: 1, priority: 0, requestHeaders: null, responseHeaders: null, ...b }))
  return {
    route: { kind: name.startsWith('tls') ? 'TLSRoute' : 'TCPRoute', namespace: 'test', name },
    backends: list, totalWeight: list.reduce((s, b) => s + b.weight, 0), idleMs: null, connectMs: null, ...over,
  }
}

export function tcpPort(port: number, route: L4Route | null): PortEntry {
  return { port, protocol: 'TCP', listeners: [{ gateway: 'test/gw', name: 'tcp', hostname: null }], http: null, serverTls: null, tcp: route, sni: null }
}

export function sniIndex(routes: Record<string, L4Route>, mode: SniIndex['mode'] = 'Passthrough'): SniIndex {
  return { ...buildHostnameIndex(Object.entries(routes)), mode }
}

export function tlsPort(port: number, sni: SniIndex, serverTls: ServerTls | null = null): PortEntry {
  return { port, protocol: 'TLS', listeners: [{ gateway: 'test/gw', name: 'tls', hostname: null }], http: null, serverTls, tcp: null, sni }
}

export function table(ports: readonly PortEntry[], clusters: readonly Cluster[], version = 1): RouteTable {
  return {
    version, builtAt: 0, gatewayClass: 'test',
    ports: new Map(ports.map((p) => [p.port, p])), clusters: new Map(clusters.map((c) => [c.id, c])), clients: new Map(),
  }
}

export async function startPlane(t: Test, tbl: RouteTable, over: Partial<DataPlaneOptions> = {}): Promise<{ plane: DataPlane; upstreams: Upstreams }> {
  const upstreams = over.upstreams ?? createUpstreams()
  const plane = createDataPlane({ bind: '127.0.0.1', upstreams, accessLog: false, ...over })
  const result = await plane.apply(tbl)
  if (result.failed.length > 0) throw result.failed[0].error
  t.teardown(async () => {
    await plane.drain(200)
    await upstreams.close()
  })
  return { plane, upstreams }
}

export async function listenOn(t: Test, server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const sockets = new Set<net.Socket>()
  server.on('connection', (s: net.Socket) => { sockets.add(s); s.once('close', () => sockets.delete(s)) })
  server.on('secureConnection', (s: net.Socket) => { sockets.add(s); s.once('close', () => sockets.delete(s)) })
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  return (server.address() as AddressInfo).port
}

/** Echoes every byte back (backpressure through pipe); `name` prefix optional on connect. */
export async function echoServer(t: Test, greeting: string | null = null): Promise<{ port: number; connections: () => number }> {
  let n = 0
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    n++
    s.on('error', () => {})
    if (greeting !== null) s.write(greeting)
    s.pipe(s)
  })
  return { port: await listenOn(t, server), connections: () => n }
}

/** Reads until the client's FIN, then answers `answer:<bytes received>` and ends (needs half-close). */
export async function halfCloseServer(t: Test): Promise<number> {
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    let bytes = 0
    s.on('error', () => {})
    s.on('data', (c: Buffer) => { bytes += c.length })
    s.on('end', () => { s.end(`answer:${bytes}`) })
  })
  return listenOn(t, server)
}

/** Records the raw bytes of each connection (until its end). */
export async function recordingServer(t: Test): Promise<{ port: number; received: Buffer[] }> {
  const received: Buffer[] = []
  const server = net.createServer((s) => {
    const chunks: Buffer[] = []
    const index = received.length
    received.push(Buffer.alloc(0))
    s.on('error', () => {})
    s.on('data', (c: Buffer) => { chunks.push(c); received[index] = Buffer.concat(chunks) })
  })
  return { port: await listenOn(t, server), received }
}

/** An upstream CONNECT proxy that accepts and never answers: a dial through it waits for its connect timeout. */
export async function silentProxy(t: Test): Promise<{ port: number; accepted: net.Socket[] }> {
  const accepted: net.Socket[] = []
  const server = net.createServer((s) => { accepted.push(s); s.on('error', () => {}); s.resume() })
  return { port: await listenOn(t, server), accepted }
}

export interface Collected {
  readonly data: Buffer
  /** 'end' (FIN received), 'close' (closed without end), 'error:<code>', or 'timeout'. */
  readonly how: string
}

/** Collects what a socket receives until it ends/closes (bounded). */
export function collect(socket: net.Socket, timeoutMs = 10_000): Promise<Collected> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    let done = false
    const finish = (how: string): void => {
      if (done) return
      done = true
      clearTimeout(timer)
      resolve({ data: Buffer.concat(chunks), how })
    }
    const timer = setTimeout(() => { finish('timeout'); socket.destroy() }, timeoutMs)
    socket.on('data', (c: Buffer) => chunks.push(c))
    // Nothing more can arrive after the FIN: close our side too (clients here allow half-open).
    socket.on('end', () => { finish('end'); socket.end() })
    socket.on('close', () => finish('close'))
    socket.on('error', (err: NodeJS.ErrnoException) => finish(`error:${err.code ?? 'unknown'}`))
  })
}

export function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true }, () => { s.off('error', reject); resolve(s) })
    s.once('error', reject)
  })
}

export function tlsConnect(port: number, options: tls.ConnectionOptions): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, ...options }, () => { s.off('error', reject); resolve(s) })
    s.once('error', reject)
  })
}

export { metricValue } from '../helpers/metrics.ts'

/** Waits until `check` is true (bounded). */
export async function until(check: () => boolean | Promise<boolean>, timeoutMs = 5000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** `promise`, or a rejection after `ms` (the timer is cleared either way). */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  try {
    return await Promise.race([promise, new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} timed out`)), ms) })])
  } finally {
    clearTimeout(timer)
  }
}
