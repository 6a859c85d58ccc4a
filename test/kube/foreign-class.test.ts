// `--gateway-class` naming a GatewayClass whose controllerName is another
// controller's: a misconfiguration. sallyport serves none of its Gateways, says
// so in its log and /config_dump, and writes no status onto them (they are the
// other controller's; writing there would have the two flap it).
import './quiet.ts'
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, request, settleLogs, startCli, tempDir } from '../e2e/harness.ts'
import { kubeconfigFile, startFake } from './fixtures.ts'

const GW = 'gateway.networking.k8s.io/v1'
const MESSAGE = /GatewayClass istio belongs to controller istio\.io\/gateway-controller, not sallyport\.io\/gateway-controller/

function istioClass(): Record<string, unknown> {
  return { apiVersion: GW, kind: 'GatewayClass', metadata: { name: 'istio' }, spec: { controllerName: 'istio.io/gateway-controller' } }
}

function istioGateway(port: number): Record<string, unknown> {
  return { apiVersion: GW, kind: 'Gateway', metadata: { name: 'istio-gw', namespace: 'default' }, spec: { gatewayClassName: 'istio', listeners: [{ name: 'http', protocol: 'HTTP', port }] } }
}

t.test('kubernetes mode: no status on another controller\'s Gateways; the log and /config_dump say why', async (t) => {
  const [port, adminPort] = [await freePort(), await freePort()]
  const fake = await startFake(t)
  fake.apply(istioClass())
  const gw = fake.apply(istioGateway(port))
  // What istio wrote.
  const istio = { conditions: [
    { type: 'Accepted', status: 'True', reason: 'Accepted', message: 'istio', observedGeneration: 1, lastTransitionTime: '2026-01-01T00:00:00Z' },
    { type: 'Programmed', status: 'True', reason: 'Programmed', message: 'istio', observedGeneration: 1, lastTransitionTime: '2026-01-01T00:00:00Z' },
  ] }
  fake.apply({ ...gw, status: istio })
  const cli = startCli(t, ['serve', '--kubernetes', '--kubeconfig', kubeconfigFile(t, fake), '--gateway-class', 'istio', '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--access-log', 'off'], {
    env: { POD_NAME: 'cli-pod', POD_NAMESPACE: 'sallyport-system', SALLYPORT_LOG_LEVEL: 'info' },
  })
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20_000, '/readyz 200')
  await eventually(async () => fake.get('coordination.k8s.io/v1', 'Lease', 'sallyport-system', 'sallyport-istio')?.spec, (s) => (s as { holderIdentity?: string } | undefined)?.holderIdentity === 'cli-pod', 10_000, 'the CLI leads')
  const line = await cli.waitFor(new RegExp(`"level":40[^\\n]*${MESSAGE.source}`), 10_000)
  t.match(line, /istio-gw/, 'a warning names the Gateway and why')
  const dump = (await request(`${admin}/config_dump`)).body
  t.match(dump, MESSAGE, '/config_dump shows it')
  // The leader has run its status passes by now (it leads, the table is applied); give it a moment more.
  await new Promise((r) => setTimeout(r, 500))
  t.equal(fake.count('PUT', /\/gateways\/istio-gw\/status$/) + fake.count('PATCH', /\/gateways\/istio-gw\/status$/), 0, 'no status written on istio\'s Gateway')
  t.same(fake.get(GW, 'Gateway', 'default', 'istio-gw')?.status, istio, "istio's status stands")
  t.equal(fake.count('PUT', /\/gatewayclasses\/istio\/status$/), 0, "nor on istio's GatewayClass")
  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0)
})

t.test('file mode: the log and /config_dump say why the Gateways are not served', async (t) => {
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), [JSON.stringify(istioClass()), JSON.stringify(istioGateway(port))].join('\n---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--gateway-class', 'istio', '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--access-log', 'off'], {
    env: { SALLYPORT_LOG_LEVEL: 'info' },
  })
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20_000, '/readyz 200')
  const line = await cli.waitFor(new RegExp(`"level":40[^\\n]*${MESSAGE.source}`), 10_000)
  t.match(line, /istio-gw/, 'a warning names the Gateway and why')
  t.match((await request(`${admin}/config_dump`)).body, MESSAGE, '/config_dump shows it')
  // Once per change: a reload that changes nothing says nothing again.
  cli.child.kill('SIGHUP')
  await settleLogs()
  await new Promise((r) => setTimeout(r, 500))
  await settleLogs()
  const count = (cli.stdout() + cli.stderr()).split('\n').filter((l) => MESSAGE.test(l) && l.includes('"condition":"Accepted"')).length
  t.equal(count, 1, 'logged once')
  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0)
})
