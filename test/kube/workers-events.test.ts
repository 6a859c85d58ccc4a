// `serve --kubernetes --workers N`: every worker compiles the same configuration,
// but a config Event (Invalid, InsecureSkipVerify, Shadowed) is about the
// configuration, not about a worker: one worker records it (the first, which
// also reports status), not N (each with count 1, and N times the per-object
// burst). Data-path Events stay with the worker that served the request.
import './quiet.ts'
import t from 'tap'
import { eventually, freePort, request, startCli } from '../e2e/harness.ts'
import { gateway, gatewayClass, kubeconfigFile, route, startFake } from './fixtures.ts'

t.test('serve --kubernetes --workers 3: one Invalid Event for one invalid route', async (t) => {
  const [port, adminPort] = [await freePort(), await freePort()]
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(port))
  const bad = route('bad', 'bad.example.test', 'a', 1) as { spec: { rules: Array<Record<string, unknown>> } }
  bad.spec.rules[0] = { ...bad.spec.rules[0], matches: [{ path: { type: 'Nope', value: '/' } }] }
  fake.apply(bad as unknown as Record<string, unknown>)
  const cli = startCli(t, ['serve', '--kubeconfig', kubeconfigFile(t, fake), '--workers', '3', '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--access-log', 'off'], {
    env: { POD_NAME: 'workers-pod', POD_NAMESPACE: 'sallyport-system', SALLYPORT_LOG_LEVEL: 'warn' },
  })
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 60_000, 'every worker ready')
  const invalid = (): Array<Record<string, unknown>> => fake.list('v1', 'Event').filter((e) => e.reason === 'Invalid' && (e.involvedObject as { name?: string }).name === 'bad')
  await eventually(async () => invalid().length, (n) => n >= 1, 10_000, 'the Invalid Event')
  await new Promise((r) => setTimeout(r, 1500)) // the other workers had their table applied by /readyz 200: their Events would be in by now
  t.equal(invalid().length, 1, 'one Event, recorded by one worker')
  t.equal(invalid()[0]?.count, 1)
  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0)
})
