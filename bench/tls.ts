// Upstream TLS cost, two ratios measured in one run:
//
//   1. requests/s through a TLS-originating Backend vs a plaintext Backend:
//      the real CLI (`sallyport serve`), one Gateway with two listeners, each
//      routed to a local upstream (https vs http, same handler); h2load --h1,
//      keep-alive, 32 clients; runs alternate (plain, tls, plain, ...), median
//      of 3 runs of 5 s each. Target: tls/plain >= 0.8.
//   2. cost of a NEW connection with session resumption on vs off: the
//      Connector (lib/upstream/connect.ts) opening and closing TLS connections
//      one after another to a local node:tls server, TLS 1.3 and TLS 1.2;
//      wall time and CPU time (client + server, one process) per connection,
//      alternating median of 5 runs of 200 connections.
//
// Everything on loopback; every loop bounded in count and time.
// Run: npx node bench/tls.ts

import fs from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import os from 'node:os'
import path from 'node:path'
import tls from 'node:tls'
import { performance } from 'node:perf_hooks'
import { Connector } from '../lib/upstream/connect.ts'
import { buildClientTls } from '../lib/upstream/tls.ts'
import type { ClusterTls, Endpoint } from '../lib/compile/table.ts'
import { runH2load } from './e2e/h2load.ts'
import { freePort, startProc, stopProc, waitForHttp } from './e2e/procs.ts'
import { clientCert, createCa, createIntermediate, serverCert } from '../test/helpers/pki.ts'
import { sallyportCommand } from './e2e/gateway.ts'

const ROOT = path.resolve(import.meta.dirname, '..')
const root = createCa('bench root')
const inter = createIntermediate(root, 'bench intermediate')
const leaf = serverCert(inter, ['api.bench'])
const client = clientCert(inter, 'bench-gateway')
const BODY = Buffer.alloc(256, 'x')

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)] as number
}

function handler(_req: http.IncomingMessage, res: http.ServerResponse): void {
  res.setHeader('content-type', 'application/octet-stream')
  res.end(BODY)
}

async function listen(s: http.Server | https.Server | tls.Server): Promise<number> {
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))
  return (s.address() as { port: number }).port
}

function manifests(plainPort: number, tlsPort: number, gwPlain: number, gwTls: number): string {
  const pem = (s: string): string => s.trim().split(/\r?\n/).map((l) => `    ${l}`).join('\n')
  const b64 = (s: string): string => Buffer.from(s).toString('base64')
  const backend = (name: string, port: number, tlsBlock: string): string => `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
  endpoints:
    - ip: { address: 127.0.0.1, port: ${port} }
${tlsBlock}---
`
  const route = (name: string, section: string, backendName: string, port: number): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: default }
spec:
  parentRefs: [{ name: bench, sectionName: ${section} }]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${backendName}, port: ${port} }]
---
`
  return `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: bench, namespace: default }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: plain, protocol: HTTP, port: ${gwPlain} }
    - { name: tls, protocol: HTTP, port: ${gwTls} }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: bench-ca, namespace: default }
data:
  ca.crt: |
${pem(root.certPem)}
---
apiVersion: v1
kind: Secret
metadata: { name: bench-client, namespace: default }
type: kubernetes.io/tls
data: { tls.crt: ${b64(client.fullChainPem)}, tls.key: ${b64(client.keyPem)} }
---
${backend('plain', plainPort, '')}${backend('tls', tlsPort, `  tls:
    sni: api.bench
    caCertificateRefs: [{ kind: ConfigMap, name: bench-ca }]
    clientCertificateRef: { name: bench-client }
`)}${route('plain', 'plain', 'plain', plainPort)}${route('tls', 'tls', 'tls', tlsPort)}`
}

async function throughput(): Promise<{ plain: number; tls: number }> {
  const plainServer = http.createServer({ keepAliveTimeout: 60_000 }, handler)
  const tlsServer = https.createServer({ key: leaf.keyPem, cert: leaf.fullChainPem, requestCert: true, rejectUnauthorized: true, ca: root.certPem, keepAliveTimeout: 60_000 }, handler)
  const plainPort = await listen(plainServer)
  const tlsPort = await listen(tlsServer)
  const [gwPlain, gwTls, admin] = [await freePort(), await freePort(), await freePort()]
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-bench-tls-'))
  fs.writeFileSync(path.join(dir, 'all.yaml'), manifests(plainPort, tlsPort, gwPlain, gwTls))
  const proc = startProc('sallyport', [...sallyportCommand(), 'serve', '--config', dir, '--bind', '127.0.0.1',
    '--admin', `127.0.0.1:${admin}`, '--access-log', 'off', '--log-level', 'warn', '--allow-destination-cidr', '127.0.0.0/8'], path.join(dir, 'sallyport.log'))
  try {
    if (!await waitForHttp(admin, '/readyz', 20_000, proc)) throw new Error(`sallyport did not become ready: ${fs.readFileSync(path.join(dir, 'sallyport.log'), 'utf8').slice(-2000)}`)
    const results = { plain: [] as number[], tls: [] as number[] }
    for (let run = 0; run < 3; run++) {
      for (const kind of ['plain', 'tls'] as const) {
        const r = await runH2load({
          url: `http://127.0.0.1:${kind === 'plain' ? gwPlain : gwTls}/`, h1: true, clients: 32, streams: 1, durationS: 5, warmupS: 1,
          rpsPerClient: null, dataFile: null, cores: null, tmpDir: dir, label: kind,
        })
        if (r.failed > 0 || r.non2xx > 0) throw new Error(`${kind}: ${r.failed} failed, ${r.non2xx} non-2xx`)
        results[kind].push(r.rps)
        console.log(`  run ${run + 1} ${kind.padEnd(5)} ${r.rps.toFixed(0)} req/s`)
      }
    }
    return { plain: median(results.plain), tls: median(results.tls) }
  } finally {
    await stopProc(proc)
    plainServer.close()
    tlsServer.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

const N_CONN = 200
const CONN_LIMIT_MS = 10_000

function clusterTls(version: 'TLSv1.2' | 'TLSv1.3'): ClusterTls {
  return {
    servername: 'api.bench', verifyHostname: 'api.bench', caPem: root.certPem, subjectAltNames: [], certPem: null, keyPem: null,
    insecureSkipVerify: false, spkiPins: [], crlPem: null, minVersion: version, alpn: [], crlStale: 'fail', crlFetch: false,
    ocsp: 'must-staple', verifyName: true, identityHash: `bench-${version}`,
  }
}

/** Sequential new connections through one Connector; ms from connect() to the socket handed over, and CPU µs (both ends), per connection. */
async function connections(port: number, version: 'TLSv1.2' | 'TLSv1.3', resume: boolean): Promise<{ ms: number; cpuUs: number; resumed: number }> {
  const endpoint: Endpoint = { host: '127.0.0.1', port, kind: 'ip', weight: 1, zone: null }
  const connector = new Connector({
    endpoint, tls: buildClientTls(clusterTls(version)), timeoutMs: 5000, resumeSessions: resume,
    resolver: { resolve: () => Promise.reject(new Error('no DNS in this bench')) },
  })
  // One warm-up connection (gets the first ticket when resuming).
  await new Promise<void>((resolve, reject) => connector.connect(null, (err, s) => { if (err !== null || s === null) reject(err); else setTimeout(() => { s.destroy(); resolve() }, 50) }))
  await new Promise((r) => setTimeout(r, 20))
  let resumed = 0
  let done = 0
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  let handshakeMs = 0
  for (let i = 0; i < N_CONN && performance.now() - t0 < CONN_LIMIT_MS; i++) {
    const start = performance.now()
    await new Promise<void>((resolve, reject) => connector.connect(null, (err, s) => {
      if (err !== null || s === null) { reject(err); return }
      handshakeMs += performance.now() - start
      const reused = (s as tls.TLSSocket).isSessionReused()
      if (reused) resumed++
      // TLS 1.3 tickets arrive after a full handshake, as they do on a pooled connection
      // that lives on: close once one came (or after 100 ms). Resumed ones get none.
      const close = (): void => { clearTimeout(timer); s.destroy(); resolve() }
      const timer = setTimeout(close, 100)
      if (version === 'TLSv1.3' && !reused) s.once('session', () => setImmediate(close))
      else setImmediate(close)
    }))
    done++
  }
  const ms = handshakeMs / done
  const cpu = process.cpuUsage(cpu0)
  return { ms, cpuUs: (cpu.user + cpu.system) / done, resumed: resumed / done }
}

async function resumption(): Promise<void> {
  for (const version of ['TLSv1.3', 'TLSv1.2'] as const) {
    const server = tls.createServer({ key: leaf.keyPem, cert: leaf.fullChainPem, maxVersion: version }, (s) => s.on('error', () => {}).resume())
    const port = await listen(server)
    const on: Array<{ ms: number; cpuUs: number; resumed: number }> = []
    const off: Array<{ ms: number; cpuUs: number; resumed: number }> = []
    for (let run = 0; run < 5; run++) {
      on.push(await connections(port, version, true))
      off.push(await connections(port, version, false))
    }
    server.close()
    const m = (xs: typeof on, k: 'ms' | 'cpuUs'): number => median(xs.map((x) => x[k]))
    console.log(`  ${version}: resumption on  ${m(on, 'ms').toFixed(3)} ms, ${m(on, 'cpuUs').toFixed(0)} µs CPU per connection (${(100 * median(on.map((x) => x.resumed))).toFixed(0)}% resumed)`)
    console.log(`  ${version}: resumption off ${m(off, 'ms').toFixed(3)} ms, ${m(off, 'cpuUs').toFixed(0)} µs CPU per connection (${(100 * median(off.map((x) => x.resumed))).toFixed(0)}% resumed)`)
    console.log(`  ${version}: on/off wall ${(m(on, 'ms') / m(off, 'ms')).toFixed(2)}, CPU ${(m(on, 'cpuUs') / m(off, 'cpuUs')).toFixed(2)}`)
  }
}

// --resumption-only: skip part 1 (no CLI, no h2load).
const ONLY_RESUMPTION = process.argv.includes('--resumption-only')
if (!ONLY_RESUMPTION) {
console.log('1. requests/s through sallyport: TLS-originating Backend (mTLS, verified chain) vs plaintext Backend (h2load --h1, 32 clients, keep-alive)')
const t = await throughput()
console.log(`  median plain ${t.plain.toFixed(0)} req/s, tls ${t.tls.toFixed(0)} req/s, ratio tls/plain ${(t.tls / t.plain).toFixed(3)} (target >= 0.8)`)
}
console.log('2. new upstream TLS connection cost, session resumption on vs off (Connector, sequential, loopback)')
await resumption()
