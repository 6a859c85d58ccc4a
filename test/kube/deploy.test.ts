// deploy/: the generated CRDs are up to date and structural; the manifests parse;
// RBAC grants exactly what Kubernetes mode uses; the Deployment keeps the
// promised safety settings; the worked example validates.
import './quiet.ts'
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { parseAllDocuments } from 'yaml'
import { CRD_DIR, generateCrds } from '../../scripts/gen-crds.ts'
import { KUBE_RESOURCES } from '../../lib/config/kube-resources.ts'
import { readConfigSet } from '../../lib/config/file-source.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { parseManifests } from '../../lib/config/parse.ts'
import { ROOT } from '../e2e/harness.ts'

type Json = Record<string, unknown>
const DEPLOY = path.join(ROOT, 'deploy')

function docsOf(file: string): Json[] {
  return parseAllDocuments(fs.readFileSync(file, 'utf8')).map((d) => d.toJSON() as Json).filter((d) => d !== null)
}

t.test('CRDs in deploy/crds are generated from schemas/ and current', async (t) => {
  for (const [name, text] of generateCrds()) {
    const file = path.join(CRD_DIR, name)
    t.ok(fs.existsSync(file), `${name} exists`)
    t.equal(fs.readFileSync(file, 'utf8'), text, `${name} is up to date (npm run gen-crds)`)
  }
})

t.test('CRD schemas are structural', async (t) => {
  const problems: string[] = []
  const walk = (node: Json, at: string): void => {
    for (const k of ['$ref', 'oneOf', 'anyOf', 'allOf', 'not', 'if', 'then', 'else', 'const', '$defs', 'patternProperties']) {
      if (k in node) problems.push(`${at}: ${k}`)
    }
    if (node.type === undefined && node['x-kubernetes-preserve-unknown-fields'] !== true) problems.push(`${at}: no type`)
    for (const [k, v] of Object.entries((node.properties ?? {}) as Record<string, Json>)) walk(v, `${at}.${k}`)
    if (typeof node.items === 'object' && node.items !== null) walk(node.items as Json, `${at}[]`)
    if (typeof node.additionalProperties === 'object' && node.additionalProperties !== null) walk(node.additionalProperties as Json, `${at}{}`)
  }
  for (const name of fs.readdirSync(CRD_DIR)) {
    const [crd] = docsOf(path.join(CRD_DIR, name)) as [Json]
    t.equal(crd.kind, 'CustomResourceDefinition')
    const versions = (crd.spec as Json).versions as Json[]
    for (const v of versions) {
      t.same(v.subresources, { status: {} }, `${name}: status subresource`)
      walk(((v.schema as Json).openAPIV3Schema) as Json, name)
    }
    const group = (crd.spec as Json).group as string
    if (group.endsWith('.k8s.io')) t.ok(((crd.metadata as Json).annotations as Json | undefined)?.['api-approved.kubernetes.io'], `${name}: protected group annotation`)
  }
  t.same(problems, [], 'no non-structural keywords or untyped nodes')
})

t.test('every manifest under deploy/ parses; kustomizations list existing files', async (t) => {
  const walk = (dir: string): string[] => fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => e.isDirectory() ? walk(path.join(dir, e.name)) : e.name.endsWith('.yaml') ? [path.join(dir, e.name)] : [])
  for (const file of walk(DEPLOY)) {
    const docs = parseAllDocuments(fs.readFileSync(file, 'utf8'))
    t.same(docs.flatMap((d) => d.errors.map((e) => e.message)), [], path.relative(ROOT, file))
    if (path.basename(file) === 'kustomization.yaml') {
      for (const r of ((docsOf(file)[0] as Json).resources as string[])) t.ok(fs.existsSync(path.join(path.dirname(file), r)), `${path.relative(ROOT, file)}: ${r}`)
    }
  }
})

t.test('RBAC: list/watch every watched kind, get and status of the ones written, Events, Leases', async (t) => {
  const docs = docsOf(path.join(DEPLOY, 'kubernetes', 'rbac.yaml'))
  const clusterRole = docs.find((d) => d.kind === 'ClusterRole') as { rules: Array<{ apiGroups: string[]; resources: string[]; verbs: string[] }> }
  const allows = (group: string, resource: string, verb: string): boolean =>
    clusterRole.rules.some((r) => r.apiGroups.includes(group) && r.resources.includes(resource) && r.verbs.includes(verb))
  for (const res of KUBE_RESOURCES) {
    t.ok(allows(res.group, res.plural, 'list') && allows(res.group, res.plural, 'watch'), `list/watch ${res.group}/${res.plural}`)
    if (res.status) t.ok(allows(res.group, `${res.plural}/status`, 'update'), `update ${res.group}/${res.plural}/status`)
    // The status writer replaces status (PUT), never patches it: no more than it uses.
    t.notOk(allows(res.group, `${res.plural}/status`, 'patch'), `no patch on ${res.group}/${res.plural}/status`)
    // The status writer reports on the kinds with `status` only, and re-reads one of
    // them (GET of the object) when its write meets a 409 Conflict
    // (lib/runtime/status-writer.ts; test/kube/status-writer.test.ts runs that
    // against this ClusterRole). Nothing else is read one object at a time.
    t.equal(allows(res.group, res.plural, 'get'), res.status, `${res.status ? '' : 'no '}get ${res.group}/${res.plural}`)
  }
  t.ok(allows('', 'events', 'create') && allows('', 'events', 'patch'), 'events create/patch')
  for (const r of clusterRole.rules) t.notOk(r.verbs.some((v) => ['create', 'update', 'delete', 'deletecollection', '*'].includes(v)) && !r.resources.every((x) => x.endsWith('/status') || x === 'events'), `no write verbs on ${r.resources.join(',')}`)
  const granted = clusterRole.rules.flatMap((r) => r.apiGroups.flatMap((g) => r.resources.map((x) => `${g}/${x}`)))
  const known = new Set([...KUBE_RESOURCES.flatMap((x) => [`${x.group}/${x.plural}`, ...(x.status ? [`${x.group}/${x.plural}/status`] : [])]), '/events'])
  t.same(granted.filter((x) => !known.has(x)), [], 'no rule on a kind sallyport does not use')
  const role = docs.find((d) => d.kind === 'Role') as { rules: Array<{ apiGroups: string[]; resources: string[]; verbs: string[] }> }
  t.same(role.rules, [{ apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] }], 'leases in its own namespace only')
})

t.test('Deployment: downward API identity, non-root, read-only root, probes, preStop, anti-affinity', async (t) => {
  const [dep] = docsOf(path.join(DEPLOY, 'kubernetes', 'deployment.yaml')) as [Json]
  const pod = ((dep.spec as Json).template as Json).spec as Json
  const c = (pod.containers as Json[])[0] as Json
  t.match(c.args, ['--kubernetes'])
  const env = c.env as Array<{ name: string; valueFrom: { fieldRef: { fieldPath: string } } }>
  t.equal(env.find((e) => e.name === 'POD_NAME')?.valueFrom.fieldRef.fieldPath, 'metadata.name')
  t.equal(env.find((e) => e.name === 'POD_NAMESPACE')?.valueFrom.fieldRef.fieldPath, 'metadata.namespace')
  // The Gateways' status.addresses are those of the egress Service, in the Deployment's own namespace.
  const args = c.args as string[]
  const publish = args[args.indexOf('--publish-service') + 1]
  const services = docsOf(path.join(DEPLOY, 'kubernetes', 'service.yaml'))
  const egress = services.find((s) => ((s.spec as Json).ports as Array<{ targetPort: unknown }>).some((p) => p.targetPort === 'http'))
  t.equal(publish, `$(POD_NAMESPACE)/${(egress?.metadata as Json).name as string}`, '--publish-service names the egress Service, in POD_NAMESPACE (expanded by Kubernetes)')
  t.equal((pod.securityContext as Json).runAsNonRoot, true)
  t.equal((c.securityContext as Json).readOnlyRootFilesystem, true)
  t.equal(((c.readinessProbe as Json).httpGet as Json).port, 'admin')
  t.equal(((c.livenessProbe as Json).httpGet as Json).port, 'admin')
  t.ok((c.lifecycle as Json).preStop, 'preStop')
  t.ok((pod.affinity as Json).podAntiAffinity, 'anti-affinity')
  t.ok((c.resources as Json).requests, 'resources')
  t.equal(pod.serviceAccountName, 'sallyport')
})

/** The documents a kustomization directory applies, by kind. */
function kustomized(dir: string): Json[] {
  const k = docsOf(path.join(dir, 'kustomization.yaml'))[0] as { resources: string[] }
  return k.resources.flatMap((r) => docsOf(path.join(dir, r)))
}
const MODES = ['file-mode', 'kubernetes'].map((m) => path.join(DEPLOY, m))

t.test('a Deployment an HPA scales sets no replicas (each apply would reset the scale)', async (t) => {
  let hpas = 0
  for (const dir of MODES) {
    const docs = kustomized(dir)
    for (const hpa of docs.filter((d) => d.kind === 'HorizontalPodAutoscaler')) {
      hpas++
      const spec = hpa.spec as { scaleTargetRef: { kind: string; name: string }; minReplicas: number }
      const target = docs.find((d) => d.kind === spec.scaleTargetRef.kind && (d.metadata as Json).name === spec.scaleTargetRef.name)
      t.ok(target, `${path.basename(dir)}: the HPA's target is shipped`)
      t.notOk(target !== undefined && 'replicas' in (target.spec as Json), `${path.basename(dir)}: ${spec.scaleTargetRef.name} leaves replicas to the HPA`)
      // With the PDB's minAvailable 1, one replica would block every voluntary eviction.
      t.ok(spec.minReplicas >= 2, `${path.basename(dir)}: minReplicas ${spec.minReplicas} >= 2`)
    }
  }
  t.equal(hpas, 1, 'the HPA of Kubernetes mode')
})

t.test('PodDisruptionBudgets never let NotReady pods block a drain', async (t) => {
  let pdbs = 0
  for (const dir of MODES) {
    for (const pdb of kustomized(dir).filter((d) => d.kind === 'PodDisruptionBudget')) {
      pdbs++
      t.equal((pdb.spec as Json).unhealthyPodEvictionPolicy, 'AlwaysAllow', `${path.basename(dir)}: unhealthyPodEvictionPolicy`)
    }
  }
  t.equal(pdbs, 2, 'one per mode')
})

t.test('each mode ships one way to find the scrape target: a ServiceMonitor or prometheus.io annotations, not both', async (t) => {
  for (const dir of MODES) {
    const docs = kustomized(dir)
    const monitor = docs.some((d) => d.kind === 'ServiceMonitor')
    const annotated = docs.some((d) => d.kind === 'Deployment' && ((((d.spec as Json).template as Json).metadata as Json).annotations as Json | undefined)?.['prometheus.io/scrape'] !== undefined)
    t.ok(monitor !== annotated, `${path.basename(dir)}: ServiceMonitor ${monitor}, annotations ${annotated}`)
  }
})

t.test('the admin port stays out of a mesh sidecar\'s inbound capture (its loopback-sourced connections would open /config_dump)', async (t) => {
  for (const dir of MODES) {
    const deployment = kustomized(dir).find((d) => d.kind === 'Deployment') as Json
    const annotations = (((deployment.spec as Json).template as Json).metadata as Json).annotations as Json | undefined
    t.equal(annotations?.['traffic.sidecar.istio.io/excludeInboundPorts'], '9901', `${path.basename(dir)}: Istio`)
    t.equal(annotations?.['config.linkerd.io/skip-inbound-ports'], '9901', `${path.basename(dir)}: Linkerd`)
  }
})

t.test('the worked example validates and compiles its references', async (t) => {
  const set = await readConfigSet([path.join(DEPLOY, 'examples', 'ai-egress')])
  const snap = buildSnapshot(set.docs, set.problems)
  t.same(snap.problems.filter((p) => p.severity === 'error'), [], 'no errors')
  t.equal(snap.backends.size, 2, 'two providers')
  const route = snap.httpRoutes.get('team-a/ai')
  t.ok(route, 'the route')
  t.ok(set.docs.some((d) => JSON.stringify(d.doc).includes('CredentialInjector')), 'credential injection extension')
})

t.test('sallyport validate reads every deploy directory without an error; file mode\'s ConfigMap holds manifests that validate too', async (t) => {
  for (const dir of ['file-mode', 'kubernetes', 'examples', 'crds']) {
    const set = await readConfigSet([path.join(DEPLOY, dir)])
    const snap = buildSnapshot(set.docs, set.problems)
    t.same(snap.problems.filter((p) => p.severity === 'error').map((p) => `${path.relative(DEPLOY, p.source.file)}:${p.source.doc}: ${p.message}`), [], dir)
  }
  // The configuration the file-mode Deployment serves, as sallyport reads it from the mounted ConfigMap.
  const configMap = docsOf(path.join(DEPLOY, 'file-mode', 'config.yaml')).find((d) => d.kind === 'ConfigMap') as { data: Record<string, string> }
  const docs = Object.entries(configMap.data).flatMap(([name, text]) => parseManifests(path.join('/etc/sallyport', name), text).docs)
  const snap = buildSnapshot(docs, [])
  t.same(snap.problems, [], 'the mounted manifests are valid')
  t.equal(snap.gateways.size, 1)
  t.equal(snap.httpRoutes.size, 1)
})
