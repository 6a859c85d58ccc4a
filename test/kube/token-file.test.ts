// A bearer token read from a file (a kubeconfig's `tokenFile`, as kubectl and
// client-go spell it; the in-cluster service account's projected token) is read
// again when the file changes: the kubelet rotates projected tokens, and tools
// that mint tokens for a remote cluster rewrite the file. A kubeconfig's
// `tokenFile` used to be ignored (client-node reads only `token-file`, and that
// once, at load): no credentials at all, 401 on every request.
import '../helpers/capture-logs.ts'
import t, { type Test } from 'tap'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { KubeClient } from '../../lib/config/kube-client.ts'
import { KubeSource } from '../../lib/config/kube-source.ts'
import { KUBE_RESOURCES } from '../../lib/config/kube-resources.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { ERROR, clearLogs, linesWith } from '../helpers/capture-logs.ts'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'
import { route, startFake, until } from './fixtures.ts'

const resources = KUBE_RESOURCES.filter((r) => r.plural === 'httproutes')

function tokenKubeconfig(t: Test, fake: FakeApiServer, field: string): { readonly kubeconfig: string; readonly token: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-token-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const token = path.join(dir, 'token')
  fs.writeFileSync(token, 'token-1\n') // as minted: a trailing newline is not part of it
  const kubeconfig = path.join(dir, 'kubeconfig')
  fs.writeFileSync(kubeconfig, fake.kubeconfig().replace('token: fake-token', `${field}: ${token}`))
  return { kubeconfig, token }
}

/** Replace the token as the kubelet does: a new file renamed over the old one. */
function rotate(file: string, token: string): void {
  fs.writeFileSync(`${file}.new`, token)
  fs.renameSync(`${file}.new`, file)
}

for (const field of ['tokenFile', 'token-file']) {
  t.test(`a kubeconfig's ${field}: its token is sent, and the rotated one once the file changes`, async (t) => {
    const fake = await startFake(t)
    fake.apply(route('r0', 'a.example.test', 'a', 9000))
    fake.acceptTokens(['token-1'])
    const { kubeconfig, token } = tokenKubeconfig(t, fake, field)
    const client = KubeClient.fromFile(kubeconfig)
    t.teardown(() => client.close())
    const source = new KubeSource({ client, resources, debounceMs: 10, backoffMs: { base: 20, max: 100 } })
    t.teardown(() => source.close())
    let last: Snapshot | null = null
    const started = source.start((s) => { last = s })
    await until('synced with the token from the file', () => last !== null, 5_000)
    await started
    t.equal(fake.requests.at(-1)?.authorization, 'Bearer token-1')

    rotate(token, 'token-2')
    fake.acceptTokens(['token-2']) // the old token revoked at once: the worst case
    fake.dropWatches()
    fake.apply(route('r0', 'b.example.test', 'a', 9000))
    const host = (): string | undefined => [...((last as Snapshot | null)?.httpRoutes.values() ?? [])][0]?.hostnames[0]
    await until('a change after the rotation is seen', () => host() === 'b.example.test', 5_000)
    t.equal(fake.requests.at(-1)?.authorization, 'Bearer token-2')
  })
}

t.test('a token a kubeconfig gives inline wins over its tokenFile (as in client-go)', async (t) => {
  const fake = await startFake(t)
  const { kubeconfig } = tokenKubeconfig(t, fake, 'tokenFile')
  fs.appendFileSync(kubeconfig, '') // the file as written: tokenFile only
  const text = fs.readFileSync(kubeconfig, 'utf8').replace(/(\n\s+)tokenFile: /, '$1token: inline$1tokenFile: ')
  fs.writeFileSync(kubeconfig, text)
  const client = KubeClient.fromFile(kubeconfig)
  t.teardown(() => client.close())
  await client.request('GET', '/api/v1/namespaces')
  t.equal(fake.requests.at(-1)?.authorization, 'Bearer inline')
})

t.test('a 401 is logged as an error naming the resource and what to check', async (t) => {
  const fake = await startFake(t)
  fake.acceptTokens(['someone-else'])
  const { kubeconfig } = tokenKubeconfig(t, fake, 'tokenFile')
  const client = KubeClient.fromFile(kubeconfig)
  t.teardown(() => client.close())
  clearLogs()
  const source = new KubeSource({ client, resources, debounceMs: 10, backoffMs: { base: 20, max: 100 } })
  t.teardown(() => source.close())
  void source.start(() => {})
  await until('the 401 is logged', () => linesWith(/unauthorized/i, ERROR).length > 0, 5_000)
  t.match(linesWith(/unauthorized/i, ERROR)[0], { resource: 'httproutes', status: 401 })
})

t.test('in the cluster, the projected service account token is read the same way', async (t) => {
  const saved = { host: process.env.KUBERNETES_SERVICE_HOST, port: process.env.KUBERNETES_SERVICE_PORT }
  process.env.KUBERNETES_SERVICE_HOST = '127.0.0.1'
  process.env.KUBERNETES_SERVICE_PORT = '443'
  t.teardown(() => {
    for (const [k, v] of [['KUBERNETES_SERVICE_HOST', saved.host], ['KUBERNETES_SERVICE_PORT', saved.port]] as const) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  })
  const client = KubeClient.inCluster()
  t.match(client.config.getCurrentUser(), { authProvider: { name: 'sallyport-token-file', config: { path: '/var/run/secrets/kubernetes.io/serviceaccount/token' } } })
  t.equal(client.config.getCurrentUser()?.token, undefined)
})
