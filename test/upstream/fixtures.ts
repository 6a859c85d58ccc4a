// Shared test scaffolding for test/upstream: clusters, requests, a promise
// around forward(), body reading. Not a test file itself.

import { createHash } from 'node:crypto'
import type { Readable } from 'node:stream'
import type { Cluster, ClusterTls, Endpoint, RouteTable } from '../../lib/compile/table.ts'
import type { SallyportError } from '../../lib/errors.ts'
import type { UpstreamRequest, UpstreamResponse, UpstreamTunnel, Upstreams } from '../../lib/upstream/types.ts'
import { listenLoopback as listen } from '../helpers/ports.ts'

export function endpoint(port: number, host = '127.0.0.1', weight = 1): Endpoint {
  return { host, port, kind: host === 'localhost' || !/^[\d.:]+$/.test(host) ? 'hostname' : 'ip', weight, zone: null }
}

export function clusterTls(over: Partial<ClusterTls> = {}): ClusterTls {
  const base: ClusterTls = {
    servername: 'localhost', verifyHostname: 'localhost', caPem: null, subjectAltNames: [], certPem: null, keyPem: null,
    insecureSkipVerify: false, spkiPins: [], crlPem: null, minVersion: 'TLSv1.2', alpn: [],
    crlStale: 'fail', crlFetch: false, ocsp: 'must-staple', verifyName: true, identityHash: 'x',
  }
  const merged = { ...base, ...over }
  // Any change of material changes the identity, as compile guarantees.
  return { ...merged, identityHash: over.identityHash ?? createHash('sha256').update(JSON.stringify({ ...merged, identityHash: '' })).digest('hex') }
}

let nextId = 0
export function cluster(over: Partial<Cluster> = {}): Cluster {
  nextId++
  return {
    id: `Backend/test/b${nextId}:80`, kind: 'Backend', namespace: 'test', name: `b${nextId}`, port: 80, protocol: 'HTTP',
    hostname: null, endpoints: [], tls: null, mcpPath: null, extensions: null, lb: null, circuitBreaker: null,
    healthCheck: null, fallback: false, region: null, enableIPv6: false, ...over,
  }
}

export function table(clusters: readonly Cluster[]): RouteTable {
  return {
    version: 1, builtAt: 0, gatewayClass: 'test', ports: new Map(), clients: new Map(),
    clusters: new Map(clusters.map((c) => [c.id, c])),
  }
}

export function request(c: Cluster, over: Partial<UpstreamRequest> = {}): UpstreamRequest {
  return {
    cluster: c, method: 'GET', path: '/', authority: 'localhost', headers: {}, body: null,
    timeouts: { connectMs: null, headersMs: null, idleMs: null }, signal: new AbortController().signal,
    upgrade: null, clientAddress: '127.0.0.1', ...over,
  }
}

export type Outcome =
  | { readonly kind: 'response'; readonly res: UpstreamResponse }
  | { readonly kind: 'tunnel'; readonly tunnel: UpstreamTunnel }
  | { readonly kind: 'error'; readonly err: SallyportError }

/** forward() as a promise; fails the test if the handler is called twice. */
export function forward(up: Upstreams, req: UpstreamRequest): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    let calls = 0
    const once = (o: Outcome): void => {
      calls++
      if (calls > 1) reject(new Error(`handler called ${calls} times`))
      else resolve(o)
    }
    up.forward(req, {
      onResponse: (res) => once({ kind: 'response', res }),
      onTunnel: (tunnel) => once({ kind: 'tunnel', tunnel }),
      onError: (err) => once({ kind: 'error', err }),
    })
  })
}

export async function readBody(body: Readable): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of body) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}

export { listen }

/** A port nothing listens on, held for the rest of the file (test/helpers/ports.ts). */
export { closedPort as deadPort } from '../helpers/ports.ts'


export function expectResponse(o: Outcome): UpstreamResponse {
  if (o.kind !== 'response') throw new Error(`expected a response, got ${o.kind}: ${o.kind === 'error' ? `${o.err.code} ${o.err.message}` : ''}`)
  return o.res
}

export function expectError(o: Outcome): SallyportError {
  if (o.kind !== 'error') throw new Error(`expected an error, got ${o.kind}`)
  return o.err
}
