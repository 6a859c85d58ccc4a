// CONNECT tunnel throughput through sallyport vs direct, in one run (issue 9).
//
// The real CLI (`sallyport serve`) with an HTTP listener and an HTTPRoute that
// allows CONNECT (sallyport.io/connect-ports) to a Backend on a local
// upstream; the client and the upstream live in this process, identical for
// both paths, so the ratio measures the tunnel hop (the CONNECT handshake
// included in each proxied run). Upload (client → upstream, answered on the
// client's FIN — half-close) and download (the upstream sends, then ends).
// Runs alternate (direct, tunnelled, ...); median of 3 runs of SIZE_MIB each,
// every run cut off after LIMIT_MS. Prints MiB/s and the ratio; target >= 0.7.
// Wall-clock rates are noisy on a shared machine, so it also prints CPU per
// GiB: sallyport's process vs this process (both ends of the copy).
//
// Run: npx node bench/connect.ts [size MiB, default 512]

import net from 'node:net'
import { runThroughputBench } from './e2e/stream-rates.ts'

/** A CONNECT tunnel through sallyport on `port` to the route's Backend. */
function tunnel(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true }, () => {
      s.write('CONNECT sink.bench.test:443 HTTP/1.1\r\nhost: sink.bench.test:443\r\n\r\n')
      let head = ''
      const onData = (c: Buffer): void => {
        head += c.toString('latin1')
        const end = head.indexOf('\r\n\r\n')
        if (end === -1) return
        s.removeListener('data', onData)
        if (!head.startsWith('HTTP/1.1 200')) return reject(new Error(`CONNECT refused: ${head.split('\r\n')[0]}`))
        if (end + 4 < head.length) s.unshift(Buffer.from(head.slice(end + 4), 'latin1'))
        resolve(s)
      }
      s.on('data', onData)
    })
    s.once('error', reject)
  })
}

function manifests(listenPort: number, upstreamPort: number): string {
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
    - { name: http, protocol: HTTP, port: ${listenPort} }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: sink, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${upstreamPort} } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: bench
  namespace: default
  annotations: { sallyport.io/connect-ports: "443" }
spec:
  parentRefs: [{ name: bench, sectionName: http }]
  hostnames: [sink.bench.test]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: sink, port: ${upstreamPort} }] }]
`
}

await runThroughputBench({
  title: 'CONNECT tunnel throughput', name: 'connect', manifests, openProxied: tunnel, sizeMiB: Number(process.argv[2] ?? 512),
})
