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

import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { cpuMsOfTree, freePort, startProc, stopProc, waitForHttp } from './e2e/procs.ts'
import { downloadRate, listen, median, upstream, uploadRate } from './e2e/stream-rates.ts'
import { sallyportCommand } from './e2e/gateway.ts'

const ROOT = path.resolve(import.meta.dirname, '..')
const SIZE_MIB = Number(process.argv[2] ?? 512)
const RUNS = 3
const LIMIT_MS = 15_000

function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true }, () => resolve(s))
    s.once('error', reject)
  })
}

async function upload(port: number): Promise<number> {
  return uploadRate(() => connect(port), SIZE_MIB, LIMIT_MS)
}

async function download(port: number): Promise<number> {
  return downloadRate(() => connect(port), SIZE_MIB, LIMIT_MS)
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

async function main(): Promise<void> {
  const server = upstream()
  const upstreamPort = await listen(server)
  const [gw, admin] = [await freePort(), await freePort()]
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-bench-tcp-'))
  fs.writeFileSync(path.join(dir, 'all.yaml'), manifests(gw, upstreamPort))
  const proc = startProc('sallyport', [...sallyportCommand(), 'serve', '--config', dir, '--bind', '127.0.0.1',
    '--admin', `127.0.0.1:${admin}`, '--access-log', 'off', '--log-level', 'warn', '--allow-destination-cidr', '127.0.0.0/8'], path.join(dir, 'sallyport.log'))
  try {
    if (!await waitForHttp(admin, '/readyz', 20_000, proc)) throw new Error(`sallyport did not become ready: ${fs.readFileSync(path.join(dir, 'sallyport.log'), 'utf8').slice(-2000)}`)
    await upload(gw) // warm-up (JIT, first connection)
    console.log(`TCP throughput, ${SIZE_MIB} MiB per run, median of ${RUNS} alternating runs (cut off at ${LIMIT_MS / 1000} s)`)
    const ratios: string[] = []
    for (const [name, fn] of [['upload', upload], ['download', download]] as const) {
      const direct: number[] = []
      const proxied: number[] = []
      let gatewayCpuMs = 0
      let endsCpuMs = 0
      let proxiedMiB = 0
      for (let run = 0; run < RUNS; run++) {
        direct.push(await fn(upstreamPort))
        const gw0 = cpuMsOfTree(proc.child.pid as number)
        const me0 = process.cpuUsage()
        const t0 = performance.now()
        proxied.push(await fn(gw))
        proxiedMiB += proxied[run] * (performance.now() - t0) / 1000
        gatewayCpuMs += cpuMsOfTree(proc.child.pid as number) - gw0
        const me = process.cpuUsage(me0)
        endsCpuMs += (me.user + me.system) / 1000
        console.log(`  ${name} run ${run + 1}: direct ${direct[run].toFixed(0)} MiB/s, sallyport ${proxied[run].toFixed(0)} MiB/s`)
      }
      const ratio = median(proxied) / median(direct)
      ratios.push(`${name} ${ratio.toFixed(2)}`)
      console.log(`${name.padEnd(8)} direct ${median(direct).toFixed(0)} MiB/s  sallyport ${median(proxied).toFixed(0)} MiB/s  ratio ${ratio.toFixed(2)} (target >= 0.7)`)
      const perGiB = (ms: number): string => (ms / (proxiedMiB / 1024)).toFixed(0)
      console.log(`${''.padEnd(8)} CPU per GiB: sallyport ${perGiB(gatewayCpuMs)} ms, client+upstream ${perGiB(endsCpuMs)} ms`)
    }
    console.log(`ratio sallyport/direct: ${ratios.join(', ')}`)
  } finally {
    await stopProc(proc)
    server.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

await main()
