// --publish-service with a --label-selector the Service does not match: the
// source never reads the Service (the API server filters it out), so the
// Gateways get no address. The warning says why, naming the flag and the
// Service, once per compile (not once per Gateway), as it does for a
// --namespace that leaves the Service's namespace out.
import '../helpers/capture-logs.ts'
import t from 'tap'
import { Runtime } from '../../lib/runtime/runtime.ts'
import { createKubeMode } from '../../lib/runtime/kube-mode.ts'
import { freePort } from '../e2e/harness.ts'
import { clearLogs, linesWith, type LogLine } from '../helpers/capture-logs.ts'

const INFO = 30
import { clientFor, gateway, gatewayClass, startFake, until } from './fixtures.ts'

const GW = 'gateway.networking.k8s.io/v1'
const LABELS = { egress: 'sallyport' }

const labelled = (o: Record<string, unknown>, name = (o.metadata as { name: string }).name): Record<string, unknown> =>
  ({ ...o, metadata: { ...(o.metadata as Record<string, unknown>), name, labels: LABELS } })

function service(labels: Record<string, string> | null): Record<string, unknown> {
  return {
    apiVersion: 'v1', kind: 'Service', metadata: { name: 'sallyport', namespace: 'sallyport-system', ...(labels === null ? {} : { labels }) },
    spec: { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], ports: [{ name: 'http', port: 80 }] },
  }
}

const applied = (): number => linesWith('route table applied', INFO).length
const serviceWarnings = (): LogLine[] => linesWith('config warning').filter((l) => l.kind === 'Service' && l.name === 'sallyport')

t.test('a --label-selector the --publish-service Service does not match: one warning per compile naming the flag and the Service; labelled, it publishes', async (t) => {
  const fake = await startFake(t)
  fake.apply(labelled(gatewayClass()))
  const gw = gateway(await freePort())
  fake.apply(labelled(gw))
  fake.apply(labelled({ ...gw, spec: { ...(gw.spec as Record<string, unknown>), listeners: [{ name: 'http', protocol: 'HTTP', port: await freePort() }] } }, 'second'))
  fake.apply(service(null))
  clearLogs()
  const kube = createKubeMode({ client: clientFor(fake), labelSelector: 'egress=sallyport', debounceMs: 10, lease: { durationMs: 1000, renewDeadlineMs: 700, retryPeriodMs: 100, identity: 'only', namespace: 'sallyport-system' } })
  const runtime = new Runtime({ configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, publishService: 'sallyport-system/sallyport', ...kube.runtimeOptions })
  t.teardown(async () => { await kube.stop(); await runtime.stop(100) })
  await runtime.start()
  kube.start()
  await until('the warning', () => serviceWarnings().length > 0)
  const [line] = serviceWarnings()
  t.equal(serviceWarnings().length, applied(), 'one line per compile, not one per Gateway')
  t.match(line, { file: '--publish-service', namespace: 'sallyport-system', name: 'sallyport' })
  t.match(line?.problem, /^--publish-service:0: Service sallyport-system\/sallyport: .*--label-selector egress=sallyport/, `names the flag and the Service: ${String(line?.problem)}`)
  t.notMatch(line?.problem, /no such Service/, 'the Service may well exist: not said to be missing')

  // Labelled, the Service is read: its address reaches the Gateways, and the warning stops.
  const warned = serviceWarnings().length
  const compiles = applied()
  fake.apply(service(LABELS))
  await until('the address written', () => JSON.stringify((fake.get(GW, 'Gateway', 'default', 'egress')?.status as { addresses?: unknown } | undefined)?.addresses) === JSON.stringify([{ type: 'IPAddress', value: '10.96.0.10' }]))
  t.ok(applied() > compiles, 'compiled again')
  t.equal(serviceWarnings().length, warned, 'no warning at the compile that read it')
})
