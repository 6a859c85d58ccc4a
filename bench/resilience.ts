// The happy-path cost of the resilience machinery (issue 6): the same route
// with and without a retry policy and a two-level failover (nothing failing),
// through the real data plane and registry to a local node:http upstream, in
// one run, rounds alternated. Prints requests/s of each and the ratio
// (target >= 0.95). Usage: node bench/resilience.ts [requests-per-round]
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { createDataPlane } from '../lib/listeners/data-plane.ts'
import { configureLogger } from '../lib/observe/log.ts'
import { createUpstreams } from '../lib/upstream/registry.ts'
import { buildTable, cluster, freePort } from '../test/helpers/table-builder.ts'

configureLogger({ level: 'silent' })
const N = Number(process.argv[2] ?? 4000)
const CONCURRENCY = 16

const origin = http.createServer((_req, res) => { res.writeHead(200, { 'content-type': 'text/plain' }).end('ok') })
await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r))
const op = (origin.address() as AddressInfo).port
const port = await freePort()
const table = buildTable({ [port]: { routes: [
  { name: 'plain', hostnames: ['plain'], rules: [{ backends: [{ cluster: 'a' }] }] },
  { name: 'resilient', hostnames: ['resilient'], rules: [{
    retry: { attempts: 2, codes: [503], backoffMs: 25, policy: null },
    backends: [{ cluster: 'a', priority: 0 }, { cluster: 'b', priority: 1 }],
  }] },
] } }, [cluster('a', op), cluster('b', op)])
const upstreams = createUpstreams()
upstreams.retain(table)
const plane = createDataPlane({ bind: '127.0.0.1', upstreams, accessLog: false, gatewayId: 'bench' })
await plane.apply(table)
const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })

function one(host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/', agent, headers: { host } }, (res) => { res.resume(); res.on('end', resolve) }).on('error', reject)
  })
}

async function round(host: string): Promise<number> {
  let left = N
  const start = process.hrtime.bigint()
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => { while (left-- > 0) await one(host) }))
  return N / (Number(process.hrtime.bigint() - start) / 1e9)
}

await round('plain'); await round('resilient') // warm-up
const plain: number[] = []
const resilient: number[] = []
for (let i = 0; i < 5; i++) { plain.push(await round('plain')); resilient.push(await round('resilient')) }
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]
const p = median(plain)
const r = median(resilient)
console.log(`plain      ${p.toFixed(0)} req/s`)
console.log(`resilient  ${r.toFixed(0)} req/s  (retry policy + 2 failover levels, nothing failing)`)
console.log(`ratio      ${(r / p).toFixed(3)}  (target >= 0.95)`)
agent.destroy()
await plane.drain(100)
await upstreams.close()
origin.close()
