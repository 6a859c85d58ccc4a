// The cost of extensions (issue 7), one run, rounds alternated: a plain route
// vs the same route with a CredentialInjector + a local RateLimit that never
// limits (target >= 0.9), and a PayloadProcessor redacting 10 KiB JSON request
// bodies vs the same bodies on a plain route (reported). The gateway — the
// real compile, data plane and registry — runs in a child process, so its CPU
// time per request is measured apart from the client and upstream (this
// process); on a shared machine CPU/request is the steadier number.
// Usage: node bench/extensions.ts [requests-per-round]
import { fork } from 'node:child_process'
import http from 'node:http'
import { serveInProcess } from './e2e/in-process-gateway.ts'
import { cpuMsOfTree, freePort, listen } from './e2e/procs.ts'

const N = Number(process.argv[2] ?? 3000)
const CONCURRENCY = 16
const ROUNDS = 5

if (process.argv[2] === 'gateway') await gateway(Number(process.argv[3]), Number(process.argv[4]))
else await main()

function yaml(gwPort: number, upPort: number): string {
  const backend = (name: string, ext: string): string => `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${upPort} } }]
${ext === '' ? '' : `  extensions:\n${ext}`}`
  const route = (name: string): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [${name}]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${name}, port: ${upPort} }] }]`
  return [`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }`, `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: egress, namespace: default, annotations: { sallyport.io/allow-destination-cidrs: 127.0.0.0/8 } }
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: ${gwPort} }]`, `apiVersion: v1
kind: Secret
metadata: { name: key, namespace: default }
stringData: { token: sk-bench-0000000000000000 }`,
  backend('plain', ''),
  backend('ext', `    - { name: inject, type: CredentialInjector, config: { secretRef: { name: key } } }
    - { name: limit, type: RateLimit, config: { requests: 1000000000, unit: Second, key: [route] } }
`),
  backend('redact', `    - { name: pii, type: PayloadProcessor, config: { request: { redact: { patterns: [email, card] } } } }
`),
  route('plain'), route('ext'), route('redact')].join('\n---\n')
}

/** Child: the gateway alone. */
async function gateway(gwPort: number, upPort: number): Promise<void> {
  await serveInProcess(yaml(gwPort, upPort))
}

async function main(): Promise<void> {
  let seenAuth = ''
  const origin = http.createServer((req, res) => {
    if (req.headers.authorization !== undefined) seenAuth = req.headers.authorization
    req.resume()
    req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok'))
  })
  const upPort = await listen(origin)
  const gwPort = await freePort()
  const child = fork(new URL(import.meta.url).pathname, ['gateway', String(gwPort), String(upPort)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('gateway did not start in 20 s')), 20_000)
    child.once('message', () => { clearTimeout(timer); resolve() })
  })
  const pid = child.pid as number
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })
  // 10 KiB JSON with an email and a card number in a few fields.
  const items = Array.from({ length: 60 }, (_, i) => ({ id: i, note: i % 10 === 0 ? `mail ann${i}@example.com card 4111 1111 1111 1111` : 'lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor' }))
  const body = Buffer.from(JSON.stringify({ model: 'x', items }))

  const one = (host: string, payload: Buffer | null): Promise<void> => new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: gwPort, path: '/', method: payload === null ? 'GET' : 'POST', agent,
      headers: payload === null ? { host } : { host, 'content-type': 'application/json', 'content-length': payload.length } }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`${host}: ${res.statusCode}`))
      res.resume(); res.on('end', resolve)
    })
    req.on('error', reject)
    req.end(payload ?? undefined)
  })
  const round = async (host: string, payload: Buffer | null): Promise<{ rps: number; cpuUs: number }> => {
    let left = N
    const cpu0 = cpuMsOfTree(pid)
    const start = process.hrtime.bigint()
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => { while (left-- > 0) await one(host, payload) }))
    const secs = Number(process.hrtime.bigint() - start) / 1e9
    return { rps: N / secs, cpuUs: (cpuMsOfTree(pid) - cpu0) * 1000 / N }
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1] as number
  const cases: Array<[string, string, Buffer | null]> = [['plain', 'plain', null], ['ext', 'ext', null], ['plain-10k', 'plain', body], ['redact-10k', 'redact', body]]
  for (const [, host, p] of cases) await round(host, p) // warm-up
  const out = new Map<string, { rps: number[]; cpu: number[] }>(cases.map(([n]) => [n, { rps: [], cpu: [] }]))
  for (let i = 0; i < ROUNDS; i++) {
    for (const [name, host, p] of cases) {
      const r = await round(host, p)
      out.get(name)?.rps.push(r.rps)
      out.get(name)?.cpu.push(r.cpuUs)
    }
  }
  const m = (name: string): { rps: number; cpu: number } => ({ rps: median(out.get(name)?.rps ?? []), cpu: median(out.get(name)?.cpu ?? []) })
  const line = (label: string, name: string): void => { const x = m(name); console.log(`${label.padEnd(44)} ${x.rps.toFixed(0).padStart(7)} req/s  ${x.cpu.toFixed(0).padStart(5)} µs CPU/req (gateway)`) }
  line('plain GET', 'plain')
  line('credential injection + local rate limit', 'ext')
  line('plain POST 10 KiB JSON', 'plain-10k')
  line('PayloadProcessor redaction, 10 KiB JSON', 'redact-10k')
  const ratio = (a: string, b: string): string => `rps ${(m(a).rps / m(b).rps).toFixed(3)}, CPU/req ${(m(b).cpu / m(a).cpu).toFixed(3)} (plain ÷ with)`
  console.log(`ratio extensions/plain:   ${ratio('ext', 'plain')}  (target >= 0.9)`)
  console.log(`ratio redaction/plain:    ${ratio('redact-10k', 'plain-10k')}  (reported)`)
  if (seenAuth !== 'Bearer sk-bench-0000000000000000') console.log('WARNING: the credential did not reach the upstream')
  agent.destroy()
  child.disconnect()
  child.kill()
  origin.close()
}
