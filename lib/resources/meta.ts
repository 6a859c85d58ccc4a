// Object metadata and provenance shared by every resource of the internal model.

/** Where an object came from: a file and the 0-based index of its YAML document, or the API server. */
export interface SourceRef {
  /** File path as given on the command line (or `kube:` + apiVersion for the API server). */
  readonly file: string
  /** 0-based document index within a multi-document file (0 for the API server). */
  readonly doc: number
}

export interface ObjectMeta {
  readonly name: string
  /** '' for cluster-scoped kinds. Namespaced objects without one in a file get `default`. */
  readonly namespace: string
  readonly uid: string
  readonly generation: number
  readonly resourceVersion: string
  /** RFC 3339 as written, or '' when absent (sorts as newest: absent timestamps lose ties). */
  readonly creationTimestamp: string
  /**
   * Files have no creationTimestamp: the file source's reload at which this
   * process first saw the object (0: at startup; kept across reloads while the
   * object exists), so an object added later is the newer. 0 from the API server.
   * Orders objects whose creationTimestamps are equal (or both absent).
   */
  readonly firstSeen: number
  readonly labels: Readonly<Record<string, string>>
  readonly annotations: Readonly<Record<string, string>>
}

/** Every object of the model carries its original apiVersion/kind, metadata and provenance. */
export interface ObjectBase<K extends string> {
  readonly kind: K
  /** apiVersion exactly as written in the manifest (for messages and status writes). */
  readonly apiVersion: string
  readonly meta: ObjectMeta
  readonly source: SourceRef
}

/** `kind/namespace/name` (namespace empty for cluster-scoped): the identity of an object in a Snapshot. */
export function objectKey(kind: string, namespace: string, name: string): string {
  return `${kind}/${namespace}/${name}`
}

/** `namespace/name` or `name` for cluster-scoped objects, for messages. */
export function displayName(meta: { readonly namespace: string; readonly name: string }): string {
  return meta.namespace === '' ? meta.name : `${meta.namespace}/${meta.name}`
}

export interface LabelSelectorRequirement {
  readonly key: string
  readonly operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist'
  readonly values: readonly string[]
}

/** metav1.LabelSelector; an empty selector (both null/empty) selects everything. */
export interface LabelSelector {
  readonly matchLabels: Readonly<Record<string, string>>
  readonly matchExpressions: readonly LabelSelectorRequirement[]
}

export function matchesSelector(selector: LabelSelector, labels: Readonly<Record<string, string>>): boolean {
  for (const key in selector.matchLabels) {
    if (labels[key] !== selector.matchLabels[key]) return false
  }
  for (const req of selector.matchExpressions) {
    const has = Object.hasOwn(labels, req.key)
    switch (req.operator) {
      case 'In': if (!has || !req.values.includes(labels[req.key] as string)) return false; break
      case 'NotIn': if (has && req.values.includes(labels[req.key] as string)) return false; break
      case 'Exists': if (!has) return false; break
      case 'DoesNotExist': if (has) return false; break
    }
  }
  return true
}
