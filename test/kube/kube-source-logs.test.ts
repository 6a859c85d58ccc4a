// What the Kubernetes source says in its log when the API server refuses it.
import '../helpers/capture-logs.ts'
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { KubeSource } from '../../lib/config/kube-source.ts'
import { ERROR, linesWith } from '../helpers/capture-logs.ts'
import { clientFor, route, startFake, until } from './fixtures.ts'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

t.test('a 403 names the RBAC file that grants the rule, and that file exists', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r0', 'r0.example.test', 'a', 9000))
  fake.forbid('httproutes')
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 50, max: 100 } })
  t.teardown(() => source.close())
  await source.start(() => {})
  await until('the 403 is logged', () => linesWith(/^forbidden to list\/watch resource/, ERROR).length > 0)
  const line = linesWith(/^forbidden to list\/watch resource/, ERROR)[0]
  t.equal(line?.resource, 'httproutes')
  const file = /\((deploy\/[^)]+\.yaml)\)/.exec(line?.msg ?? '')?.[1]
  t.ok(file !== undefined, `the message names a manifest: ${line?.msg}`)
  t.ok(fs.existsSync(path.join(ROOT, file ?? 'none')), `${file} exists`)
})
