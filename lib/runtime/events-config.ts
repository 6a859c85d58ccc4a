// Config-level Events: each problem of an object read from the API server (an
// invalid object dropped, insecureSkipVerify, an object shadowed by a file) is
// recorded once as a Warning on that object — again only when it changes, so a
// reload does not repeat it (the recorder would aggregate it anyway).

import { isKubeSourced } from '../config/kube-combined-source.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import type { EventRecorder } from './events.ts'

export class ConfigEvents {
  readonly #recorder: EventRecorder
  #last = new Set<string>()

  constructor(recorder: EventRecorder) {
    this.#recorder = recorder
  }

  update(problems: readonly ConfigProblem[]): void {
    const next = new Set<string>()
    for (const p of problems) {
      if (!isKubeSourced(p.source) || p.kind === '' || p.name === '') continue
      const reason = reasonOf(p)
      const message = p.field === '' ? p.message : `${p.field}: ${p.message}`
      const id = `${p.source.file}|${p.namespace}|${p.name}|${reason}|${message}`
      next.add(id)
      if (this.#last.has(id)) continue
      // SourceRef of API objects: `kube:<apiVersion>/<kind>`.
      const apiVersion = p.source.file.slice('kube:'.length, p.source.file.lastIndexOf('/'))
      this.#recorder.record({ apiVersion, kind: p.source.file.slice(p.source.file.lastIndexOf('/') + 1), namespace: p.namespace, name: p.name }, 'Warning', reason, message)
    }
    this.#last = next
  }
}

function reasonOf(p: ConfigProblem): string {
  if (p.severity === 'error') return p.rule === undefined ? 'Invalid' : 'RuleDropped'
  if (p.field.endsWith('insecureSkipVerify')) return 'InsecureSkipVerify'
  if (p.message.startsWith('shadowed by')) return 'Shadowed'
  return 'ConfigWarning'
}
