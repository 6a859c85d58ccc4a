// Files and the API server together (`serve --kubernetes --config PATH`).
//
// How they combine: the union of both snapshots. When both define the same
// object (same kind, namespace and name), the FILE wins — files are the local
// override / bootstrap layer an operator controls on the node, the API server
// the shared one — and the shadowed API object gets a warning problem naming
// the file (so `/config_dump`, the logs and an Event say why an edit to it
// has no effect). Status is written only for objects read from the API server
// that are actually in use (status-writer.ts skips shadowed ones).
// Each source keeps its own "last good": a broken file keeps its last good
// objects, an unreachable API server keeps the last synced objects; the merged
// snapshot is rebuilt whenever either side changes.

import { CLUSTER_SCOPED } from '../resources/model.ts'
import type { ModelObject } from '../resources/model.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import type { Snapshot } from '../resources/snapshot.ts'

export type SnapshotListener = (snapshot: Snapshot) => void | Promise<void>

/** What the Runtime needs of a configuration source (FileSource has this shape). */
export interface ConfigSource {
  start(onSnapshot: SnapshotListener): Promise<void>
  reload(): Promise<void>
  close(): void
  /** Problems of what serves its last good version instead of what is on disk (the file source's unreadable or unparsable files). */
  rejected?(): readonly ConfigProblem[]
}

export class CombinedSource implements ConfigSource {
  readonly #files: ConfigSource
  readonly #kube: ConfigSource
  #fileSnap: Snapshot | null = null
  #kubeSnap: Snapshot | null = null
  #onSnapshot: SnapshotListener | null = null
  #started = false

  constructor(files: ConfigSource, kube: ConfigSource) {
    this.#files = files
    this.#kube = kube
  }

  async start(onSnapshot: SnapshotListener): Promise<void> {
    this.#onSnapshot = onSnapshot
    await Promise.all([
      this.#files.start((s) => { this.#fileSnap = s; return this.#emit() }),
      this.#kube.start((s) => { this.#kubeSnap = s; return this.#emit() }),
    ])
    this.#started = true
    await this.#emit()
  }

  async reload(): Promise<void> {
    await Promise.all([this.#files.reload(), this.#kube.reload()])
  }

  close(): void {
    this.#files.close()
    this.#kube.close()
  }

  rejected(): readonly ConfigProblem[] {
    return this.#files.rejected?.() ?? []
  }

  async #emit(): Promise<void> {
    // Nothing before both sides have loaded once: a half configuration would
    // flap routes in and out at start.
    if (!this.#started || this.#fileSnap === null || this.#kubeSnap === null || this.#onSnapshot === null) return
    await this.#onSnapshot(mergeSnapshots(this.#fileSnap, this.#kubeSnap))
  }
}

/** Union of two snapshots; on a kind/namespace/name collision the file object wins and the API object gets a warning. */
export function mergeSnapshots(files: Snapshot, kube: Snapshot): Snapshot {
  const out: Record<string, unknown> = {}
  const problems: ConfigProblem[] = [...files.problems, ...kube.problems]
  for (const name of Object.keys(files) as Array<keyof Snapshot>) {
    if (name === 'problems' || name === 'watchedNamespaces' || name === 'labelSelector') continue
    const fileMap = files[name] as ReadonlyMap<string, ModelObject>
    const kubeMap = kube[name] as ReadonlyMap<string, ModelObject>
    const merged = new Map<string, ModelObject>(kubeMap)
    for (const [key, obj] of fileMap) {
      const shadowed = kubeMap.get(key)
      if (shadowed !== undefined) {
        problems.push({
          source: shadowed.source, kind: shadowed.kind, namespace: CLUSTER_SCOPED.has(shadowed.kind) ? '' : shadowed.meta.namespace, name: shadowed.meta.name, field: '',
          message: `shadowed by ${obj.source.file}:${obj.source.doc}: a file-defined object wins over the API server's (this one is ignored)`, severity: 'warning',
        })
      }
      merged.set(key, obj)
    }
    out[name] = merged
  }
  out.problems = problems
  // Files may hold objects of any namespace; what --namespace leaves out is the API server's.
  out.watchedNamespaces = kube.watchedNamespaces ?? null
  out.labelSelector = kube.labelSelector ?? null
  return out as unknown as Snapshot
}

/** Read from the API server (SourceRef `kube:...`) rather than a file. */
export function isKubeSourced(source: { readonly file: string }): boolean {
  return source.file.startsWith('kube:')
}
