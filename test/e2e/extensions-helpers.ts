// Manifests and a request helper for the extension end-to-end tests.
import http from 'node:http'
import { routeYaml } from './harness.ts'

export function get(url: string, host: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { headers: { host, ...headers }, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (s: string) => { body += s })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }))
    })
    req.setTimeout(10000, () => req.destroy(new Error('timeout')))
    req.on('error', reject)
    req.end()
  })
}

export function egressBackend(name: string, port: number, extensions: string): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
spec:
  endpoints:
    - ip:
        address: 127.0.0.1
        port: ${port}
  extensions:
${extensions}`
}

/** The HTTPRoute of the extension tests: harness.ts routeYaml (filters optional). */
export const route = routeYaml


export interface Sent { method: string; url: string; headers: http.IncomingHttpHeaders; body: string }

export interface Recorder {
  readonly port: number
  readonly seen: Sent[]
  /** Answers a request (default: 200 with the request as JSON). */
  handler: (req: Sent, res: http.ServerResponse) => void
}

const echo = (req: Sent, res: http.ServerResponse): void => {
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(JSON.stringify(req))
}

/** A real upstream on 127.0.0.1 that records every request (body read whole). */
export async function recorder(t: { teardown(fn: () => unknown): void }, handler: Recorder['handler'] = echo): Promise<Recorder> {
  const seen: Sent[] = []
  const r: Recorder = { port: 0, seen, handler }
  const server = http.createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (s: string) => { body += s })
    req.on('end', () => {
      const s: Sent = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body }
      seen.push(s)
      r.handler(s, res)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  ;(r as { port: number }).port = (server.address() as { port: number }).port
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return r
}

export interface Ask {
  host: string
  path?: string
  method?: string
  headers?: Record<string, string>
  body?: string
  /** Source address (another loopback address, for client attribution by Pod IP). */
  from?: string
}

export interface Answer { status: number; headers: http.IncomingHttpHeaders; body: string }

/** One HTTP/1.1 request on a fresh connection, bounded in time. */
export function send(port: number, a: Ask): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1', port, path: a.path ?? '/', method: a.method ?? (a.body === undefined ? 'GET' : 'POST'), agent: false,
      localAddress: a.from, headers: { host: a.host, ...a.headers },
    }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (s: string) => { body += s })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }))
    })
    req.setTimeout(10000, () => req.destroy(new Error('timeout')))
    req.on('error', reject)
    req.end(a.body)
  })
}

/** A Pod of the configuration: attributes requests from `ip` to namespace/serviceAccount. */
export function pod(namespace: string, name: string, serviceAccount: string, ip: string): string {
  return `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: ${namespace}
spec:
  serviceAccountName: ${serviceAccount}
  containers:
    - name: app
      image: example/app
status:
  podIP: ${ip}
`
}

/** The value of one sample of `name` whose labels include all of `labels` (Prometheus text), or 0. */
export function sample(metrics: string, name: string, labels: Record<string, string>): number {
  let sum = 0
  for (const line of metrics.split('\n')) {
    if (!line.startsWith(name + '{')) continue
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) sum += Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return sum
}
