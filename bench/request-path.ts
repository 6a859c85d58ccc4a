// Micro-benchmark of the per-request hot functions of the HTTP request path,
// each printed as a ratio against a baseline measured in the same run:
//   headers  forwardableHeaders + markHop + addForwarded + header edits
//            vs a bare object spread of the same headers (the least any proxy does)
//   route    hostOf + findVirtualHost + matchRequest + pickBackend + rewritePath
//            vs one Map.get of the host (the least a host router does)
//   metrics  recordRequest (requests, duration, bytes in/out for one series)
//            vs one unlabelled prom-client Counter.inc
//   sni      ConnectionSni.misdirects (GEP-3567) on a port of four HTTPS listeners:
//            the request's host against the listener its connection's SNI selected
//            vs one Map.get of the host
// Inputs are built before timing; fixed counts; alternating median of 7 runs;
// each run stops after 2 s whatever the count.
// Run: npx node bench/request-path.ts
import type { IncomingHttpHeaders } from 'node:http'
import { Counter, Registry } from 'prom-client'
import { addForwarded, applyHeaderEdits, forwardableHeaders, hostOf, markHop } from '../lib/router/headers.ts'
import { pickBackend, rewritePath } from '../lib/router/filters.ts'
import { findVirtualHost, matchRequest, type MatchInput } from '../lib/router/match.ts'
import { recordRequest, type RequestKey } from '../lib/observe/http-metrics.ts'
import type { HeaderEdits, HostIndex, ListenerNames } from '../lib/compile/table.ts'
import { ConnectionSni } from '../lib/router/misdirected.ts'
import { buildTable, cluster } from '../test/helpers/table-builder.ts'

const N = 200_000
const RUNS = 7
const LIMIT_MS = 2000

function flat(s: string): string { return Buffer.from(s, 'latin1').toString('latin1') }

const requestHeaders: IncomingHttpHeaders[] = []
for (let i = 0; i < 64; i++) {
  requestHeaders.push({
    host: flat(`api${i}.example.com`), 'user-agent': 'bench/1.0', accept: '*/*', 'accept-encoding': 'gzip, br',
    'content-type': 'application/json', 'content-length': '42', authorization: flat(`Bearer t${i}`),
    'x-request-id': flat(`req-${i}`), 'x-forwarded-for': '10.0.0.1', connection: 'keep-alive', 'keep-alive': 'timeout=5',
    traceparent: flat(`00-${i}-01`),
  })
}
const edits: HeaderEdits = { set: [['x-env', 'prod']], add: [['x-tag', 'a']], remove: ['x-debug'] }

const table = buildTable({
  80: {
    routes: Array.from({ length: 64 }, (_, i) => ({
      name: `r${i}`, hostnames: [`api${i}.example.com`],
      rules: [
        { matches: [{ path: { type: 'PathPrefix' as const, value: `/v1/items` } }], rewritePath: { type: 'ReplacePrefixMatch' as const, value: '/items' }, backends: [{ cluster: 'a', weight: 9 }, { cluster: 'b', weight: 1 }] },
        { matches: [{ path: { type: 'Exact' as const, value: '/health' } }], backends: [{ cluster: 'a' }] },
      ],
    })),
  },
}, [cluster('a', 1), cluster('b', 2)])
const index = table.ports.get(80)?.http as HostIndex
const inputs: Array<{ authority: string; input: MatchInput }> = requestHeaders.map((h, i) => ({
  authority: flat(`${h.host}:8080`),
  input: { method: 'GET', path: flat(i % 2 === 0 ? `/v1/items/${i}` : '/health'), query: null, header: () => undefined },
}))
const hostMap = new Map(inputs.map((x) => [x.authority, x]))

const benches: Record<string, [() => number, () => number]> = {
  headers: [
    () => { let n = 0; for (let i = 0; i < N; i++) { const out = { ...requestHeaders[i & 63] }; n += out.host === undefined ? 0 : 1 } return n },
    () => {
      let n = 0
      for (let i = 0; i < N; i++) {
        const out = forwardableHeaders(requestHeaders[i & 63], false)
        markHop(out, 'gw-1'); addForwarded(out, '10.1.2.3', 'http'); applyHeaderEdits(out, edits)
        n += out['x-env'] === undefined ? 0 : 1
      }
      return n
    },
  ],
  route: [
    () => { let n = 0; for (let i = 0; i < N; i++) n += hostMap.get(inputs[i & 63].authority) === undefined ? 0 : 1; return n },
    () => {
      let n = 0
      for (let i = 0; i < N; i++) {
        const x = inputs[i & 63]
        const vhost = findVirtualHost(index, hostOf(x.authority))
        const m = vhost === null ? null : matchRequest(vhost, x.input)
        if (m === null) continue
        const b = pickBackend(m.rule, (i % 97) / 97)
        const p = m.rule.rewritePath === null ? x.input.path : rewritePath(x.input.path, m.rule.rewritePath, m.path)
        n += b === null ? 0 : p.length
      }
      return n
    },
  ],
  metrics: (() => {
    const plain = new Counter({ name: 'bench_plain_total', help: 'x', registers: [new Registry()] })
    // Eight routes' worth of table objects, as a request would carry them.
    const client = { namespace: 'apps', serviceAccount: 'web', pod: 'web-1' }
    const listener = { gateway: 'ns/gw', name: 'http', hostname: null }
    const keys: RequestKey[] = Array.from({ length: 8 }, (_, r) => ({
      ruleKey: {}, clusterKey: {}, clientKey: client, listenerKey: listener, status: 200,
      labels: () => ({ gateway: 'ns/gw', listener: 'http', route: `ns/r${r}`, backend: 'Service/ns/svc:80', namespace: 'apps', serviceAccount: 'web', status: 200 }),
    }))
    return [
      () => { for (let i = 0; i < N; i++) plain.inc(); return N },
      () => {
        for (let i = 0; i < N; i++) recordRequest(keys[i & 7], 0.001, 0, 512)
        return N
      },
    ] as [() => number, () => number]
  })(),
  sni: (() => {
    // Connections made for an exact listener, the wildcard one and the catch-all; hosts of each
    // kind: the SNI itself, another name of the SNI's listener, another listener's.
    const names: ListenerNames = { exact: new Map([['a.example.com', 0], ['b.example.com', 1]]), wildcards: [{ suffix: '.example.com', value: 2 }], fallback: 3 }
    const conns = ['a.example.com', 'c.example.com', 'other.test'].map((n) => new ConnectionSni(n))
    const hosts = ['a.example.com', 'b.example.com', 'c.example.com', 'd.example.com', 'other.test', 'x.y.example.com', 'a.example.com', 'c.example.com'].map(flat)
    const seen = new Map(hosts.map((h) => [h, 1]))
    return [
      () => { let n = 0; for (let i = 0; i < N; i++) n += seen.get(hosts[i & 7]) ?? 0; return n },
      () => { let n = 0; for (let i = 0; i < N; i++) n += conns[i % 3].misdirects(names, hosts[i & 7]) ? 1 : 0; return n },
    ] as [() => number, () => number]
  })(),
}

function time(fn: () => number): number {
  const start = process.hrtime.bigint()
  fn()
  return Number(process.hrtime.bigint() - start) / 1e6
}

function median(xs: number[]): number { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] }

for (const [name, [baseline, subject]] of Object.entries(benches)) {
  baseline(); subject() // warm up
  const b: number[] = []
  const s: number[] = []
  const deadline = Date.now() + LIMIT_MS * RUNS * 2
  for (let r = 0; r < RUNS && Date.now() < deadline; r++) { b.push(time(baseline)); s.push(time(subject)) }
  const bm = median(b)
  const sm = median(s)
  const perOp = (ms: number): string => `${((ms * 1e6) / N).toFixed(0)} ns/op`
  process.stdout.write(`${name.padEnd(8)} baseline ${perOp(bm).padStart(12)}  subject ${perOp(sm).padStart(12)}  ratio ${(sm / bm).toFixed(1)}×\n`)
}
