// The real CLI in Kubernetes mode against the fake API server, as the kube e2e
// tests start it: a loopback upstream `a`, the class, a Gateway on a free port,
// Backend `a` and HTTPRoute `one` (host one.example.test) to it, and
// `sallyport serve --kubernetes --kubeconfig FILE` on loopback with its admin
// port, POD_NAME/POD_NAMESPACE set as the Deployment sets them.
import type { Test } from 'tap'
import { startDemoUpstream, type DemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'
import { type Cli, eventually, freePort, request, startCli } from '../e2e/harness.ts'
import { backend, gateway, gatewayClass, kubeconfigFile, route, startFake } from './fixtures.ts'

export interface KubeCli {
  readonly cli: Cli
  readonly fake: FakeApiServer
  readonly upstream: DemoUpstream
  /** The Gateway's listener port. */
  readonly port: number
  /** `http://127.0.0.1:ADMIN`. */
  readonly admin: string
}

/**
 * Starts it and waits for /readyz 200 (unless `waitReady: false`). `args`: more serve flags; `before`:
 * objects to apply before the CLI starts; `accessLog`: on (default off);
 * the log level is info (the kube tests' own is silent).
 */
export async function startKubeCli(t: Test, options: { args?: readonly string[]; before?: (fake: FakeApiServer) => void; accessLog?: boolean; waitReady?: boolean } = {}): Promise<KubeCli> {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'a' })
  t.teardown(() => upstream.close())
  const [port, adminPort] = [await freePort(), await freePort()]
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(port))
  fake.apply(backend('a', upstream.address.port))
  fake.apply(route('one', 'one.example.test', 'a', upstream.address.port))
  options.before?.(fake)
  const cli = startCli(t, [
    'serve', '--kubernetes', '--kubeconfig', kubeconfigFile(t, fake), '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`,
    '--drain-seconds', '1', ...(options.accessLog === true ? [] : ['--access-log', 'off']), ...(options.args ?? []),
  ], { env: { POD_NAME: 'cli-pod', POD_NAMESPACE: 'sallyport-system', SALLYPORT_LOG_LEVEL: 'info' } })
  const admin = `http://127.0.0.1:${adminPort}`
  if (options.waitReady !== false) await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20_000, '/readyz 200')
  return { cli, fake, upstream, port, admin }
}
