// The cost of tracing (issue 10), one run, rounds alternated: three gateway
// child processes on the same table — tracing off, on at 100 % sampling, on at
// 1 % — exporting OTLP/protobuf to a sink in this process that reads and
// discards. Requests carry no traceparent, so the ratio sampler decides.
// Reported per case: req/s and the gateway's CPU time per request (from
// /proc; the steadier number on a shared machine). Target: 1 % >= 0.95 of off.
// Usage: node bench/tracing.ts [requests-per-round]
import { fork, type ChildProcess } from 'node:child_process'
import http from 'node:http'
import { serveInProcess } from './e2e/in-process-gateway.ts'
import { cpuMsOfTree, freePort, listen } from './e2e/procs.ts'

const N = Number(process.argv[2] ?? 3000)
const CONCURRENCY = 16
const ROUNDS = 5

if (process.argv[2] === 'gateway') await gateway(Number(process.argv[3]), Number(process.argv[4]), process.argv[5] as string, process.argv[6] as string)
else await main()

function yaml(gwPort: number, upPort: number): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: egress, namespace: default, annotations: { sallyport.io/allow-destination-cidrs: 127.0.0.0/8 } }
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: ${gwPort} }]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: api, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${upPort} } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: api, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [api.example.test]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: ${upPort} }] }]`
}

/** Child: the gateway alone, tracing per `mode` ('off' or a ratio). */
async function gateway(gwPort: number, upPort: number, mode: string, sink: string): Promise<void> {
  await serveInProcess(yaml(gwPort, upPort), async () => {
    if (mode === 'off') return
    const { installTracer } = await import('../lib/observe/tracing.ts')
    installTracer({ endpoint: new URL(sink), protocol: 'http/protobuf', sampling: Number(mode), delayMs: 200 })
  })
}

async function main(): Promise<void> {
  const origin = http.createServer((req, res) => { req.resume(); req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok')) })
  const upPort = await listen(origin)
  let sinkBytes = 0
  let sinkRequests = 0
  const sink = http.createServer((req, res) => { sinkRequests++; req.on('data', (c: Buffer) => { sinkBytes += c.length }); req.on('end', () => res.end()) })
  const sinkUrl = `http://127.0.0.1:${await listen(sink)}/v1/traces`
  const modes = [['off', 'off'], ['100%', '1'], ['1%', '0.01']] as const
  const children = new Map<string, { child: ChildProcess; port: number }>()
  for (const [name, mode] of modes) {
    const port = await freePort()
    const child = fork(new URL(import.meta.url).pathname, ['gateway', String(port), String(upPort), mode, sinkUrl], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('gateway did not start in 20 s')), 20_000)
      child.once('message', () => { clearTimeout(timer); resolve() })
    })
    children.set(name, { child, port })
  }
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY * modes.length })
  const one = (port: number): Promise<void> => new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/items', agent, headers: { host: 'api.example.test' } }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`))
      res.resume(); res.on('end', resolve)
    })
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')))
    req.on('error', reject)
    req.end()
  })
  const round = async (name: string): Promise<{ rps: number; cpuUs: number }> => {
    const { child, port } = children.get(name) as { child: ChildProcess; port: number }
    let left = N
    const cpu0 = cpuMsOfTree(child.pid as number)
    const start = process.hrtime.bigint()
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => { while (left-- > 0) await one(port) }))
    const secs = Number(process.hrtime.bigint() - start) / 1e9
    await new Promise((r) => setTimeout(r, 250)) // the batch (200 ms delay) is exported inside the measured CPU window
    return { rps: N / secs, cpuUs: (cpuMsOfTree(child.pid as number) - cpu0) * 1000 / N }
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1] as number
  for (const [name] of modes) await round(name) // warm-up
  const out = new Map<string, { rps: number[]; cpu: number[] }>(modes.map(([n]) => [n, { rps: [], cpu: [] }]))
  for (let i = 0; i < ROUNDS; i++) {
    for (const [name] of modes) {
      const r = await round(name)
      out.get(name)?.rps.push(r.rps)
      out.get(name)?.cpu.push(r.cpuUs)
    }
  }
  const m = (name: string): { rps: number; cpu: number } => ({ rps: median(out.get(name)?.rps ?? []), cpu: median(out.get(name)?.cpu ?? []) })
  for (const [name] of modes) {
    const x = m(name)
    console.log(`tracing ${name.padEnd(5)} ${x.rps.toFixed(0).padStart(7)} req/s  ${x.cpu.toFixed(1).padStart(6)} µs CPU/req (gateway)`)
  }
  const ratio = (a: string): string => `rps ${(m(a).rps / m('off').rps).toFixed(3)}, CPU/req ${(m('off').cpu / m(a).cpu).toFixed(3)} (off ÷ on)`
  console.log(`ratio 1%/off:   ${ratio('1%')}  (target >= 0.95)`)
  console.log(`ratio 100%/off: ${ratio('100%')}  (reported)`)
  console.log(`sink: ${sinkRequests} export requests, ${(sinkBytes / 1024).toFixed(0)} KiB`)
  agent.destroy()
  for (const { child } of children.values()) { child.disconnect(); child.kill() }
  origin.close()
  sink.close()
}
