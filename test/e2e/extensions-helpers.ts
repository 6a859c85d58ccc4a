// Manifests and a request helper for the extension end-to-end tests.
import http from 'node:http'

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

export function route(name: string, hostname: string, backend: string, port: number, filters = ''): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs:
    - name: egress
  hostnames:
    - ${hostname}
  rules:
    - ${filters === '' ? '' : `filters:\n${filters}\n      `}backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: ${backend}
          port: ${port}
`
}

