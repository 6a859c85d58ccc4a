// metadata → ObjectMeta, with the defaults a file source needs: objects read
// from disk have no uid, resourceVersion or creationTimestamp, and usually no
// generation, so those get neutral values ('' and 1) that compare and sort
// predictably (an absent creationTimestamp sorts as newest, see meta.ts).

import type { ObjectMeta } from './meta.ts'
import { CLUSTER_SCOPED } from './model.ts'
import { type Fields, nonEmptyAt, numberAt, objectAt, stringMapAt, textAt } from './read-fields.ts'

/** The ObjectMeta of `doc`, namespaced or not according to the model `kind`. */
export function readMeta(doc: Fields, kind: string): ObjectMeta {
  const m = objectAt(doc, 'metadata')
  const clusterScoped = CLUSTER_SCOPED.has(kind)
  const generation = numberAt(m, 'generation')
  return {
    name: textAt(m, 'name') ?? '',
    // Kubernetes puts namespaced objects without a namespace in `default` (kubectl apply does the same).
    namespace: clusterScoped ? '' : nonEmptyAt(m, 'namespace') ?? 'default',
    uid: textAt(m, 'uid') ?? '',
    generation: generation !== null && generation >= 1 ? Math.floor(generation) : 1,
    resourceVersion: textAt(m, 'resourceVersion') ?? '',
    creationTimestamp: textAt(m, 'creationTimestamp') ?? '',
    firstSeen: 0,
    labels: stringMapAt(m, 'labels'),
    annotations: stringMapAt(m, 'annotations'),
  }
}

/** `apiVersion` as written, or ''. */
export function apiVersionOf(doc: Fields): string {
  return textAt(doc, 'apiVersion') ?? ''
}

/** The API group of an apiVersion ('' for core `v1`). */
export function groupOf(apiVersion: string): string {
  const slash = apiVersion.indexOf('/')
  return slash === -1 ? '' : apiVersion.slice(0, slash)
}
