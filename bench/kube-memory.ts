// Kubernetes mode: the heap the Kubernetes source holds per Pod (or per
// EndpointSlice, `--kind slices`). sallyport watches Pods and EndpointSlices
// cluster-wide (client identity by source address, EndpointSelector Backends,
// Service endpoints), so a gateway's memory grows with the cluster; this
// measures by how much. The fake API server runs on a worker thread
// (bench/e2e/apiserver-thread.ts: its own isolate, so its copies are not
// counted); the KubeSource lists and watches it in this isolate, and the heap
// after two full collections is compared with the same source over one Pod.
// The Pods are shaped like a Deployment's running Pods (managed fields, one
// container with env, probes and a projected token volume, conditions and a
// container status: about 5 KiB of JSON each); the slices like the
// endpointslice controller's for a Service of 20 Pods (about 6 KiB each).
//
// Run: npx node --expose-gc bench/kube-memory.ts [--pods N] [--kind pods|slices]
import { parseArgs } from 'node:util'
import { KubeConfig } from '@kubernetes/client-node'
import { KubeClient } from '../lib/config/kube-client.ts'
import { KubeSource } from '../lib/config/kube-source.ts'
import type { Snapshot } from '../lib/resources/snapshot.ts'
import { ApiServerThread } from './e2e/apiserver-thread.ts'

process.env.SALLYPORT_LOG_LEVEL ??= 'silent'
const { values } = parseArgs({ options: { pods: { type: 'string', default: '5000' }, kind: { type: 'string', default: 'pods' } } })
const slices = values.kind === 'slices'
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error('run with node --expose-gc')

function ip(i: number): string {
  return `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`
}

/** A running Pod of one of 97 Deployments in 40 namespaces. */
function pod(i: number): Record<string, unknown> {
  const app = `app-${i % 97}`
  const fields = { 'f:metadata': { 'f:labels': { '.': {}, 'f:app': {} } }, 'f:spec': { 'f:containers': { 'k:{"name":"app"}': { '.': {}, 'f:image': {}, 'f:env': { '.': {}, 'k:{"name":"A"}': {} }, 'f:resources': { 'f:limits': {}, 'f:requests': {} } } } }, 'f:status': { 'f:conditions': {}, 'f:containerStatuses': {}, 'f:podIP': {}, 'f:podIPs': {} } }
  const probe = (path: string): Record<string, unknown> => ({ httpGet: { path, port: 8080, scheme: 'HTTP' }, periodSeconds: 10, timeoutSeconds: 1, successThreshold: 1, failureThreshold: 3 })
  return {
    apiVersion: 'v1', kind: 'Pod',
    metadata: {
      name: `${app}-7f9c8d-${i}`, namespace: `team-${i % 40}`, labels: { app, 'pod-template-hash': '7f9c8d', 'app.kubernetes.io/part-of': 'shop' },
      annotations: { 'kubectl.kubernetes.io/restartedAt': '2026-11-01T00:00:00Z', 'prometheus.io/scrape': 'true', 'prometheus.io/port': '9090' },
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: `${app}-7f9c8d`, uid: `rs-${i % 97}`, controller: true, blockOwnerDeletion: true }],
      managedFields: ['kube-controller-manager', 'kubelet', 'kubectl'].map((manager) => ({ manager, operation: 'Update', apiVersion: 'v1', time: '2026-11-01T00:00:00Z', fieldsType: 'FieldsV1', fieldsV1: fields })),
    },
    spec: {
      serviceAccountName: `sa-${i % 97}`, nodeName: `node-${i % 50}`, restartPolicy: 'Always', dnsPolicy: 'ClusterFirst', schedulerName: 'default-scheduler', terminationGracePeriodSeconds: 30,
      containers: [{
        name: 'app', image: `registry.example/${app}:1.2.3`, ports: [{ containerPort: 8080, protocol: 'TCP' }],
        env: Array.from({ length: 12 }, (_, k) => ({ name: `ENV_${k}`, value: `value-${k}-${'x'.repeat(20)}` })),
        resources: { limits: { cpu: '1', memory: '512Mi' }, requests: { cpu: '100m', memory: '128Mi' } },
        volumeMounts: [{ name: 'kube-api-access', mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', readOnly: true }],
        livenessProbe: probe('/healthz'), readinessProbe: probe('/readyz'),
        terminationMessagePath: '/dev/termination-log', terminationMessagePolicy: 'File', imagePullPolicy: 'IfNotPresent',
      }],
      volumes: [{ name: 'kube-api-access', projected: { defaultMode: 420, sources: [{ serviceAccountToken: { expirationSeconds: 3607, path: 'token' } }, { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } }, { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } }] } }],
      tolerations: ['not-ready', 'unreachable'].map((k) => ({ key: `node.kubernetes.io/${k}`, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 })),
    },
    status: {
      phase: 'Running', podIP: ip(i), podIPs: [{ ip: ip(i) }], hostIP: '192.168.0.1', startTime: '2026-11-01T00:00:00Z', qosClass: 'Burstable',
      conditions: ['Initialized', 'Ready', 'ContainersReady', 'PodScheduled'].map((type) => ({ type, status: 'True', lastProbeTime: null, lastTransitionTime: '2026-11-01T00:00:00Z' })),
      containerStatuses: [{ name: 'app', ready: true, restartCount: 0, started: true, image: `registry.example/${app}:1.2.3`, imageID: `registry.example/app@sha256:${'ab'.repeat(32)}`, containerID: `containerd://${'cd'.repeat(32)}`, state: { running: { startedAt: '2026-11-01T00:00:00Z' } }, lastState: {} }],
    },
  }
}

/** An EndpointSlice of a Service with 20 ready Pods, as the endpointslice controller writes it. */
function slice(i: number): Record<string, unknown> {
  const svc = `svc-${i}`
  return {
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', addressType: 'IPv4',
    metadata: {
      name: `${svc}-x7k2p`, namespace: `team-${i % 40}`, generateName: `${svc}-`,
      labels: { 'kubernetes.io/service-name': svc, 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io', app: svc },
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2026-11-01T00:00:00Z' },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: svc, uid: `svc-uid-${i}`, controller: true, blockOwnerDeletion: true }],
      managedFields: [{ manager: 'kube-controller-manager', operation: 'Update', apiVersion: 'discovery.k8s.io/v1', time: '2026-11-01T00:00:00Z', fieldsType: 'FieldsV1', fieldsV1: { 'f:addressType': {}, 'f:endpoints': {}, 'f:metadata': { 'f:labels': {}, 'f:ownerReferences': {} }, 'f:ports': {} } }],
    },
    endpoints: Array.from({ length: 20 }, (_, k) => ({
      addresses: [ip(i * 20 + k)], conditions: { ready: true, serving: true, terminating: false }, nodeName: `node-${k % 50}`, zone: `eu-1${'abc'[k % 3]}`,
      targetRef: { kind: 'Pod', namespace: `team-${i % 40}`, name: `${svc}-7f9c8d-${k}`, uid: `pod-uid-${i}-${k}` },
    })),
    ports: [{ name: 'http', port: 8080, protocol: 'TCP', appProtocol: 'http' }],
  }
}

/** Heap held by a synced KubeSource over `count` Pods (or slices), and the JSON size of one. */
async function measure(count: number): Promise<{ heap: number, json: number, pods: number }> {
  const api = new ApiServerThread()
  const kubeconfig = await api.start()
  let json = 0
  for (let i = 0; i < count; i += 500) {
    const batch = Array.from({ length: Math.min(500, count - i) }, (_, k) => (slices ? slice(i + k) : pod(i + k)))
    json += batch.reduce((n, p) => n + JSON.stringify(p).length, 0)
    await api.apply(...batch)
  }
  gc?.(); gc?.()
  const before = process.memoryUsage().heapUsed
  const kc = new KubeConfig()
  kc.loadFromString(kubeconfig)
  const source = new KubeSource({ client: new KubeClient(kc), debounceMs: 10, pageSize: 500 })
  let snapshot: Snapshot | null = null
  await source.start((s) => { snapshot = s })
  await new Promise((r) => setTimeout(r, 500))
  gc?.(); gc?.()
  const heap = process.memoryUsage().heapUsed - before
  const pods = (slices ? (snapshot as Snapshot | null)?.endpointSlices.size : (snapshot as Snapshot | null)?.pods.size) ?? 0
  source.close()
  await api.stop()
  return { heap, json: json / Math.max(1, count), pods }
}

const n = Number(values.pods)
const one = await measure(1)
const many = await measure(n)
const perPod = (many.heap - one.heap) / (n - 1)
const what = slices ? 'EndpointSlice' : 'Pod'
console.log(`Kubernetes source over ${n} ${slices ? 'EndpointSlices of 20 endpoints' : 'running Pods'} (${(many.json / 1024).toFixed(1)} KiB of JSON each, ${many.pods} in the snapshot):`)
console.log(`  heap held ${(many.heap / 1048576).toFixed(1)} MiB, ${(one.heap / 1048576).toFixed(1)} MiB of it with one ${what}: ${(perPod / 1024).toFixed(2)} KiB per ${what}`)
process.exit(0)
