// File mode logs status: each unhealthy condition once per change; problems at every load.
import t from 'tap'
import { Writable } from 'node:stream'
import { configureLogger } from '../../lib/observe/log.ts'
import type { Condition, ObjectStatus, Status } from '../../lib/compile/status.ts'
import type { ConfigProblem } from '../../lib/resources/problem.ts'

const lines: Array<Record<string, unknown>> = []
configureLogger({
  level: 'info',
  destination: new Writable({ write(chunk: Buffer, _enc, cb) { lines.push(JSON.parse(chunk.toString('utf8')) as Record<string, unknown>); cb() } }),
})
const { StatusLog } = await import('../../lib/runtime/status-log.ts')

const cond = (type: string, status: Condition['status'], reason: string, message = ''): Condition => ({ type, status, reason, message, observedGeneration: 1 })
const obj = (name: string, conditions: Condition[]): ObjectStatus => ({ kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'ns', name, generation: 1, conditions, parents: [], listeners: [] })
const status = (...objects: ObjectStatus[]): Status => ({ objects: new Map(objects.map((o) => [`HTTPRoute/ns/${o.name}`, o])), servedGateways: new Set() })
const flush = (): Promise<void> => new Promise((r) => setImmediate(r))

t.test('unhealthy conditions are logged once per change', async (t) => {
  const log = new StatusLog(true)
  lines.length = 0
  log.status(status(obj('a', [cond('Accepted', 'True', 'Accepted'), cond('ResolvedRefs', 'False', 'BackendNotFound', 'Backend ns/x not found')]), obj('b', [cond('Conflicted', 'False', 'NoConflicts')])))
  await flush()
  t.same(lines.map((l) => [l.name, l.condition, l.reason, l.message]), [['a', 'ResolvedRefs', 'BackendNotFound', 'Backend ns/x not found']])
  t.equal(lines[0]?.level, 40)

  lines.length = 0
  log.status(status(obj('a', [cond('ResolvedRefs', 'False', 'BackendNotFound', 'Backend ns/x not found')])))
  await flush()
  t.same(lines, [], 'unchanged: nothing logged')

  log.status(status(obj('a', [cond('ResolvedRefs', 'True', 'ResolvedRefs')]), obj('b', [cond('Conflicted', 'True', 'Conflicted', 'older route')])))
  log.status(status(obj('a', [cond('ResolvedRefs', 'False', 'BackendNotFound', 'Backend ns/x not found')])))
  await flush()
  t.same(lines.map((l) => [l.name, l.condition]), [['b', 'Conflicted'], ['a', 'ResolvedRefs']], 'a change, and a condition coming back, are logged again')
})

t.test('problems are logged at every load, warnings as warnings', async (t) => {
  const log = new StatusLog(true)
  const p = (severity: ConfigProblem['severity']): ConfigProblem => ({ source: { file: 'f.yaml', doc: 2 }, kind: 'Backend', namespace: 'ns', name: 'b', field: 'spec.tls.insecureSkipVerify', message: 'verification disabled', severity })
  lines.length = 0
  log.problems([p('warning'), p('error')])
  log.problems([p('warning')])
  await flush()
  t.same(lines.map((l) => l.level), [40, 50, 40])
  t.equal(lines[0]?.problem, 'f.yaml:2: Backend ns/b: spec.tls.insecureSkipVerify: verification disabled')
})

t.test("compile's problems: errors as requests failing, warnings (a --publish-service Service missing) as warnings", async (t) => {
  const log = new StatusLog(true)
  lines.length = 0
  log.keptProblems([
    { source: { file: 'f.yaml', doc: 0 }, kind: 'EgressExtension', namespace: 'ns', name: 'e', field: 'spec', message: 'Secret ns/k not found', severity: 'error' },
    { source: { file: '--publish-service', doc: 0 }, kind: 'Service', namespace: 'sallyport-system', name: 'sallyport', field: '', message: 'no such Service', severity: 'warning' },
  ])
  await flush()
  t.same(lines.map((l) => [l.level, l.msg]), [[50, 'config problem: requests that need it fail'], [40, 'config warning']])
})

t.test('quiet mode (other workers) logs at debug only', async (t) => {
  const log = new StatusLog(false)
  lines.length = 0
  log.status(status(obj('q', [cond('Accepted', 'False', 'NotAllowedByListeners')])))
  await flush()
  t.same(lines, [])
})
