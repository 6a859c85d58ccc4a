// TCP throughput through sallyport vs direct, in one run (issue 8).
//
// The real CLI (`sallyport serve`) with a TCP listener and a TCPRoute to a
// Backend on a local upstream; the client and the upstream live in this
// process, identical for both paths, so the ratio measures the extra hop.
// Two directions: upload (client → upstream; the upstream counts and answers
// on the client's FIN — half-close) and download (the upstream sends, then
// ends). Runs alternate (direct, proxied, direct, ...); median of 3 runs of
// SIZE_MIB each, every run cut off after LIMIT_MS (its rate then counts the
// bytes moved so far). Prints MiB/s of each and the ratio proxied/direct.
// Target: >= 0.7. On a loaded or small machine wall-clock rates are noisy, so
// it also prints CPU per GiB: sallyport's process vs this process (which runs
// both ends of the copy, in both paths).
//
// Run: npx node bench/tcp.ts [size MiB, default 512]

import { connectPlain, runThroughputBench } from './e2e/stream-rates.ts'

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
    - { name: tcp, protocol: TCP, port: ${listenPort} }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: sink, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${upstreamPort} } }]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: { name: bench, namespace: default }
spec:
  parentRefs: [{ name: bench, sectionName: tcp }]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: sink, port: ${upstreamPort} }] }]
`
}

await runThroughputBench({
  title: 'TCP throughput', name: 'tcp', manifests, openProxied: connectPlain, sizeMiB: Number(process.argv[2] ?? 512),
})
