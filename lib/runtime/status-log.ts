// File mode has no API server to write status to, so status goes to the log:
// every condition not in its healthy state (not True; for Conflicted/Overridden,
// True), once per change (a reload that changes
// nothing for an object says nothing about it again). Config problems are
// logged at every load — in particular the insecureSkipVerify warnings, which
// must keep showing while the setting stays (DESIGN.md "Safety defaults").

import { logger } from '../observe/log.ts'
import { formatProblem } from '../resources/problem.ts'
import type { Condition, Status } from '../compile/status.ts'
import type { ConfigProblem } from '../resources/problem.ts'

const log = logger('status')

// Conditions whose healthy state is False (Gateway API ListenerConditionConflicted,
// Envoy Gateway's Overridden policies): for these, True is the one worth a line.
const NEGATIVE_POLARITY: ReadonlySet<string> = new Set(['Conflicted', 'Overridden', 'Degraded', 'Detached'])

function isHealthy(c: Condition): boolean {
  return NEGATIVE_POLARITY.has(c.type) ? c.status === 'False' : c.status === 'True'
}

export class StatusLog {
  readonly #loud: boolean
  /** condition identity → `status|reason|message` last logged. */
  #last = new Map<string, string>()

  /** `loud` false: everything at debug (the other workers of a cluster repeat the first one). */
  constructor(loud: boolean) {
    this.#loud = loud
  }

  problems(problems: readonly ConfigProblem[]): void {
    for (const p of problems) {
      const fields = { file: p.source.file, doc: p.source.doc, kind: p.kind, namespace: p.namespace, name: p.name, field: p.field, problem: formatProblem(p) }
      if (!this.#loud) log.debug(fields, 'config problem')
      else if (p.severity === 'error' && p.rule !== undefined) log.error({ ...fields, rule: p.rule }, 'config problem: route rule dropped')
      else if (p.severity === 'error') log.error(fields, 'config problem: object ignored')
      else log.warn(fields, 'config warning')
    }
  }

  /**
   * Problems of objects that are kept but cannot do all they should (compile's:
   * an extension Secret reference), and compile's warnings (a --publish-service
   * Service that is missing: no Gateway gets addresses, traffic is not affected).
   */
  keptProblems(problems: readonly ConfigProblem[]): void {
    for (const p of problems) {
      const fields = { file: p.source.file, doc: p.source.doc, kind: p.kind, namespace: p.namespace, name: p.name, field: p.field, problem: formatProblem(p) }
      if (!this.#loud) log.debug(fields, 'config problem')
      else if (p.severity === 'warning') log.warn(fields, 'config warning')
      else log.error(fields, 'config problem: requests that need it fail')
    }
  }

  status(status: Status): void {
    const next = new Map<string, string>()
    for (const obj of status.objects.values()) {
      const base = { kind: obj.kind, namespace: obj.namespace, name: obj.name }
      for (const c of obj.conditions) this.#condition(next, base, '', c)
      for (const parent of obj.parents) {
        // Most parents are healthy: build the `where` text only for one that is not (issue 11, thousands of routes per reload).
        if (parent.conditions.every(isHealthy)) continue
        const ref = parent.parentRef
        const where = `parent ${ref.kind} ${ref.namespace === '' ? '' : `${ref.namespace}/`}${ref.name}${ref.sectionName === null ? '' : `/${ref.sectionName}`}`
        for (const c of parent.conditions) this.#condition(next, base, where, c)
      }
      for (const listener of obj.listeners) {
        for (const c of listener.conditions) this.#condition(next, base, `listener ${listener.name}`, c)
      }
    }
    this.#last = next
  }

  #condition(next: Map<string, string>, base: { kind: string; namespace: string; name: string }, where: string, c: Condition): void {
    if (isHealthy(c)) return
    const id = `${base.kind}/${base.namespace}/${base.name}|${where}|${c.type}`
    const value = `${c.status}|${c.reason}|${c.message}`
    next.set(id, value)
    if (this.#last.get(id) === value) return
    const fields = { ...base, ...(where === '' ? {} : { on: where }), condition: c.type, status: c.status, reason: c.reason, message: c.message }
    if (!this.#loud) log.debug(fields, 'status condition')
    else if (c.status !== 'Unknown') log.warn(fields, 'status condition')
    else log.info(fields, 'status condition')
  }
}
