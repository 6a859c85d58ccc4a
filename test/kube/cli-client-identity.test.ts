// The real CLI in Kubernetes mode attributes a request to the Pod that sent it
// once the kubelet has written the Pod's IP into its status (after the Pod was
// created and scheduled), and stops when the Pod has finished and its IP went
// back to the pool.
import './quiet.ts'
import t from 'tap'
import { eventually } from '../e2e/harness.ts'
import { send } from '../e2e/extensions-helpers.ts'
import { startKubeCli } from './cli-fixture.ts'

const CLIENT_IP = '127.0.0.57'

function pod(status: Record<string, unknown> | null, nodeName: string | null): Record<string, unknown> {
  return {
    apiVersion: 'v1', kind: 'Pod', metadata: { name: 'checkout-7f9c', namespace: 'payments' },
    spec: { serviceAccountName: 'checkout', ...(nodeName === null ? {} : { nodeName }), containers: [{ name: 'app', image: 'example/app' }] },
    ...(status === null ? {} : { status }),
  }
}

t.test('kube mode: client identity follows the Pod status the kubelet writes', async (t) => {
  const { cli, fake, port } = await startKubeCli(t, { accessLog: true, before: (fake) => fake.apply(pod(null, null)) })
  let n = 0
  const attributed = async (): Promise<string | null> => {
    const path = `/probe-${++n}`
    const r = await send(port, { host: 'one.example.test', path, from: CLIENT_IP })
    if (r.status !== 200) return `status ${r.status}`
    const line = await cli.waitFor(new RegExp(`\\{[^\\n]*"path":"${path}"[^\\n]*\\}`))
    const entry = JSON.parse(line) as { clientNamespace?: string | null; clientServiceAccount?: string | null }
    return entry.clientNamespace == null ? null : `${entry.clientNamespace}/${String(entry.clientServiceAccount)}`
  }
  t.equal(await attributed(), null, 'a Pod without an IP identifies nobody')

  fake.apply(pod({ phase: 'Pending' }, 'node-a'))
  // The kubelet writes the IP a while after the scheduler bound the Pod: let the binding be applied first.
  await new Promise((r) => setTimeout(r, 500))
  fake.apply(pod({ phase: 'Running', podIP: CLIENT_IP, podIPs: [{ ip: CLIENT_IP }] }, 'node-a'))
  await eventually(attributed, (who) => who === 'payments/checkout', 10_000, 'attributed after the status write')
  t.pass('the status-written IP identifies payments/checkout')

  fake.apply(pod({ phase: 'Succeeded', podIP: CLIENT_IP, podIPs: [{ ip: CLIENT_IP }] }, 'node-a'))
  await eventually(attributed, (who) => who === null, 10_000, 'no longer attributed once the Pod finished')
  t.pass('a finished Pod identifies nobody')

  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0)
})
