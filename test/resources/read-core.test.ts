import t from 'tap'
import { readObject } from '../../lib/resources/read.ts'
import { configMapFieldsRead, endpointSliceFieldsRead, podFieldsRead, secretFieldsRead, statusRead } from '../../lib/resources/read-core.ts'
import type { ConfigMap, EndpointSlice, Namespace, Pod, Secret, Service } from '../../lib/resources/model.ts'

const src = { file: 'inline.yaml', doc: 0 }

t.test('Secret: data decoded, stringData merged over it', async (t) => {
  const s = readObject({
    apiVersion: 'v1', kind: 'Secret', metadata: { name: 's', namespace: 'n' }, type: 'kubernetes.io/tls',
    data: { 'tls.crt': Buffer.from('CERT').toString('base64'), shared: Buffer.from('old').toString('base64'), wrapped: 'QU\nJD' },
    stringData: { shared: 'new', extra: 'plain' },
  }, src) as Secret
  t.equal(s.type, 'kubernetes.io/tls')
  t.same(Object.keys(s.data).sort(), ['extra', 'shared', 'tls.crt', 'wrapped'])
  t.equal(s.data['tls.crt']!.toString(), 'CERT')
  t.equal(s.data['shared']!.toString(), 'new')
  t.equal(s.data['extra']!.toString(), 'plain')
  t.equal(s.data['wrapped']!.toString(), 'ABC')
  t.ok(Buffer.isBuffer(s.data['extra']))
  const empty = readObject({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'e' } }, src) as Secret
  t.equal(empty.type, 'Opaque')
  t.same(empty.data, {})
})

t.test('ConfigMap: data kept, binaryData ignored', async (t) => {
  const c = readObject({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'ca' }, data: { 'ca.crt': 'PEM' }, binaryData: { b: 'AAAA' } }, src) as ConfigMap
  t.same(c.data, { 'ca.crt': 'PEM' })
})

t.test('Service', async (t) => {
  const s = readObject({
    apiVersion: 'v1', kind: 'Service', metadata: { name: 'api', namespace: 'shop' },
    spec: { clusterIP: 'None', selector: { app: 'api' }, ports: [{ port: 80, targetPort: 'http' }, { name: 'grpc', port: 9000, targetPort: 9001, protocol: 'TCP', appProtocol: 'kubernetes.io/h2c' }] },
  }, src) as Service
  t.equal(s.type, 'ClusterIP')
  t.equal(s.clusterIP, 'None')
  t.equal(s.externalName, null)
  t.same(s.selector, { app: 'api' })
  t.same(s.ports, [
    { name: '', port: 80, targetPort: 'http', protocol: 'TCP', appProtocol: null },
    { name: 'grpc', port: 9000, targetPort: 9001, protocol: 'TCP', appProtocol: 'kubernetes.io/h2c' },
  ])
  t.same(s.clusterIPs, [], 'headless: no cluster IP')
  const headless = readObject({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'h' }, spec: { clusterIP: 'None', clusterIPs: ['None'] } }, src) as Service
  t.same(headless.clusterIPs, [], 'nor as the API server writes it (clusterIPs ["None"])')
  const ext = readObject({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'x' }, spec: { type: 'ExternalName', externalName: 'db.example.com' } }, src) as Service
  t.equal(ext.externalName, 'db.example.com')
  t.same(ext.ports, [])
  t.same(ext.clusterIPs, [])
  t.same(ext.loadBalancerIngress, [])
})

t.test('Service: cluster IPs and load balancer ingress (what --publish-service publishes)', async (t) => {
  const single = readObject({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'gw' }, spec: { clusterIP: '10.96.0.10' } }, src) as Service
  t.same(single.clusterIPs, ['10.96.0.10'], 'clusterIP alone (an older object without clusterIPs)')
  const lb = {
    apiVersion: 'v1', kind: 'Service', metadata: { name: 'gw' },
    spec: { type: 'LoadBalancer', clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10', 'fd00::a'] },
    status: { loadBalancer: { ingress: [{ ip: '203.0.113.7', ipMode: 'VIP' }, { hostname: 'lb.example.net' }, {}] }, conditions: [{ type: 'x' }] },
  }
  const s = readObject(lb, src) as Service
  t.same(s.clusterIPs, ['10.96.0.10', 'fd00::a'], 'both families, in order')
  t.same(s.loadBalancerIngress, [{ ip: '203.0.113.7', hostname: null }, { ip: null, hostname: 'lb.example.net' }], 'an entry with neither is dropped')
  t.same(statusRead('Service', lb), [['203.0.113.7', null], [null, 'lb.example.net']], 'the ingress is the status the source compares')
  const moved = { ...lb, status: { ...lb.status, conditions: [{ type: 'y' }] } }
  t.same(statusRead('Service', moved), statusRead('Service', lb), 'other status changes are not')
})

t.test('EndpointSlice: service name from label, condition defaults', async (t) => {
  const e = readObject({
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
    metadata: { name: 'api-abc', namespace: 'shop', labels: { 'kubernetes.io/service-name': 'api' } },
    addressType: 'IPv4',
    endpoints: [
      { addresses: ['10.0.0.1'] },
      { addresses: ['10.0.0.2'], conditions: { ready: false }, zone: 'z1' },
      { addresses: ['10.0.0.3'], conditions: { ready: false, serving: true, terminating: true } },
    ],
    ports: [{ port: 8080 }, { name: 'grpc', port: 9000, protocol: 'TCP', appProtocol: 'h2c' }],
  }, src) as EndpointSlice
  t.equal(e.serviceName, 'api')
  t.equal(e.addressType, 'IPv4')
  t.same(e.endpoints, [
    { addresses: ['10.0.0.1'], ready: true, serving: true, terminating: false, zone: null },
    { addresses: ['10.0.0.2'], ready: false, serving: false, terminating: false, zone: 'z1' },
    { addresses: ['10.0.0.3'], ready: false, serving: true, terminating: true, zone: null },
  ])
  t.same(e.ports, [{ name: '', port: 8080, protocol: 'TCP', appProtocol: null }, { name: 'grpc', port: 9000, protocol: 'TCP', appProtocol: 'h2c' }])
  const bare = readObject({ apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'b' } }, src) as EndpointSlice
  t.equal(bare.serviceName, null)
  t.same(bare.endpoints, [])
})

t.test('Namespace and Pod', async (t) => {
  const ns = readObject({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'shop', labels: { mesh: 'on' } } }, src) as Namespace
  t.equal(ns.meta.namespace, '')
  t.same(ns.meta.labels, { mesh: 'on' })
  const pod = readObject({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'shop' }, spec: { serviceAccountName: 'cart', nodeName: 'n1' }, status: { podIP: '10.0.0.9', podIPs: [{ ip: '10.0.0.9' }, { ip: 'fd00::9' }] } }, src) as Pod
  t.same(pod.podIPs, ['10.0.0.9', 'fd00::9'])
  t.equal(pod.serviceAccountName, 'cart')
  t.equal(pod.nodeName, 'n1')
  const old = readObject({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'q' }, spec: {}, status: { podIP: '10.0.0.8' } }, src) as Pod
  t.same(old.podIPs, ['10.0.0.8'])
  t.equal(old.serviceAccountName, 'default')
  t.equal(old.nodeName, null)
  const pending = readObject({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'r' } }, src) as Pod
  t.same(pending.podIPs, [])
})

t.test('Pod: what the Kubernetes source keeps of one reads the same as the whole object, at a fraction of its size', async (t) => {
  const full = {
    apiVersion: 'v1', kind: 'Pod',
    metadata: {
      name: 'api-7f9c-x2', namespace: 'shop', uid: 'u1', resourceVersion: '42', generation: 3, creationTimestamp: '2026-11-01T00:00:00Z', labels: { app: 'api' },
      annotations: { 'kubectl.kubernetes.io/restartedAt': 'now' }, ownerReferences: [{ kind: 'ReplicaSet', name: 'api-7f9c' }],
      managedFields: [{ manager: 'kubelet', fieldsV1: { 'f:status': { 'f:conditions': {}, 'f:podIPs': {} } } }],
    },
    spec: { serviceAccountName: 'api', nodeName: 'n1', hostNetwork: true, containers: [{ name: 'app', image: 'x', env: [{ name: 'A', value: 'a'.repeat(800) }] }], volumes: [{ name: 'v', emptyDir: {} }] },
    status: { phase: 'Running', podIP: '10.0.0.9', podIPs: [{ ip: '10.0.0.9' }, { ip: 'fd00::9' }], conditions: [{ type: 'PodScheduled', status: 'True' }, { type: 'Ready', status: 'False' }], containerStatuses: [{ name: 'app', restartCount: 2 }] },
  }
  const kept = podFieldsRead(full)
  const { annotations: _a, ...metaOfKept } = (readObject(kept, src) as Pod).meta
  const { annotations: _b, ...metaOfFull } = (readObject(full, src) as Pod).meta
  t.same({ ...(readObject(kept, src) as Pod), meta: metaOfKept }, { ...(readObject(full, src) as Pod), meta: metaOfFull }, 'the same Pod but for annotations, which no Pod setting is read from')
  t.ok(JSON.stringify(kept).length * 3 < JSON.stringify(full).length, `${JSON.stringify(kept).length} of ${JSON.stringify(full).length} bytes`)
  t.equal((kept.metadata as Record<string, unknown>).managedFields, undefined)
  t.equal((readObject(kept, src) as Pod).hostNetwork, true)
  t.equal((readObject(kept, src) as Pod).ready, false, 'the Ready condition is kept')
  t.same(statusRead('Pod', kept), statusRead('Pod', full), 'the status fields the source compares are kept')
  t.equal(statusRead('Service', { status: { loadBalancer: {} } }), null, 'a Service without a load balancer address: none')
  t.equal(statusRead('Gateway', { status: { conditions: [] } }), null, 'no kind but Pods and Services has status the model reads')
})

t.test('Pod: a finished Pod carries no address', async (t) => {
  for (const phase of ['Succeeded', 'Failed']) {
    const p = readObject({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'job' }, status: { phase, podIP: '10.0.0.7', podIPs: [{ ip: '10.0.0.7' }] } }, src) as Pod
    t.same(p.podIPs, [], phase)
  }
})

t.test('ConfigMap and Secret: what the Kubernetes source keeps reads the same where sallyport reads it', async (t) => {
  const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n'
  const lastApplied = JSON.stringify({ data: { 'ca.crt': pem, 'dashboard.json': 'x'.repeat(1000) } })
  const cm = {
    apiVersion: 'v1', kind: 'ConfigMap',
    metadata: { name: 'bundle', namespace: 'shop', uid: 'u', resourceVersion: '7', labels: { a: 'b' }, annotations: { 'kubectl.kubernetes.io/last-applied-configuration': lastApplied, team: 'infra' }, managedFields: [{ manager: 'kubectl' }] },
    data: { 'ca.crt': pem, 'dashboard.json': '{"panels":[' + '{}'.repeat(5000) + ']}' },
    binaryData: { blob: Buffer.alloc(4096).toString('base64') },
  }
  const kept = configMapFieldsRead(cm)
  const full = readObject(cm, src) as ConfigMap
  const slim = readObject(kept, src) as ConfigMap
  t.equal(slim.data['ca.crt'], pem, 'PEM values kept')
  t.equal(slim.data['dashboard.json'], '', 'a value that is no PEM is kept as a key only: "has no key" and "is not PEM" stay apart')
  t.same(Object.keys(slim.data).sort(), Object.keys(full.data).sort())
  t.same(slim.meta.labels, full.meta.labels)
  t.same(slim.meta.annotations, { team: 'infra' }, 'without kubectl\'s copy of the whole object')
  t.ok(JSON.stringify(kept).length * 10 < JSON.stringify(cm).length, `${JSON.stringify(kept).length} of ${JSON.stringify(cm).length} bytes`)

  const secret = {
    apiVersion: 'v1', kind: 'Secret', type: 'kubernetes.io/tls',
    metadata: { name: 'cert', namespace: 'shop', annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{"data":{"tls.key":"c2VjcmV0"}}' }, managedFields: [{ manager: 'kubectl' }] },
    data: { 'tls.crt': Buffer.from(pem).toString('base64'), 'tls.key': Buffer.from('secret').toString('base64') },
  }
  const keptSecret = secretFieldsRead(secret)
  t.same((readObject(keptSecret, src) as Secret).data, (readObject(secret, src) as Secret).data, 'a Secret keeps all its data')
  t.equal((readObject(keptSecret, src) as Secret).type, 'kubernetes.io/tls')
  t.notMatch(JSON.stringify(keptSecret), 'last-applied', 'but not kubectl\'s plain copy of it')
  t.equal((keptSecret.metadata as Record<string, unknown>).managedFields, undefined)
})

t.test('EndpointSlice: what the Kubernetes source keeps reads the same, at a fraction of its size', async (t) => {
  const slice = {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', addressType: 'IPv4',
    metadata: { name: 'api-x7k2p', namespace: 'shop', uid: 'u', resourceVersion: '9', generation: 4, labels: { 'kubernetes.io/service-name': 'api', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2026-11-27T00:00:00Z' }, ownerReferences: [{ kind: 'Service', name: 'api', uid: 's' }],
      managedFields: [{ manager: 'kube-controller-manager', fieldsV1: { 'f:endpoints': {}, 'f:ports': {} } }] },
    endpoints: Array.from({ length: 20 }, (_, i) => ({
      addresses: [`10.0.0.${i}`], conditions: { ready: i % 3 !== 0, serving: true, terminating: i % 3 === 0 }, zone: 'eu-1a', nodeName: `node-${i}`,
      targetRef: { kind: 'Pod', namespace: 'shop', name: `api-${i}`, uid: `pod-uid-${i}` }, hints: { forZones: [{ name: 'eu-1a' }] },
    })),
    ports: [{ name: 'http', port: 8080, protocol: 'TCP', appProtocol: 'http' }],
  }
  const kept = endpointSliceFieldsRead(slice)
  t.same({ ...readObject(kept, src), meta: null }, { ...readObject(slice, src), meta: null })
  t.same((readObject(kept, src) as EndpointSlice).meta.labels, (readObject(slice, src) as EndpointSlice).meta.labels)
  t.ok(JSON.stringify(kept).length * 2 < JSON.stringify(slice).length, `${JSON.stringify(kept).length} of ${JSON.stringify(slice).length} bytes`)
})
