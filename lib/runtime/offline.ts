// The commands that read manifests without serving them: `validate` and `routes`.

import { buildSnapshot } from '../config/snapshot-builder.ts'
import { readConfigSet } from '../config/file-source.ts'
import { compile, type CompileResult } from '../compile/compile.ts'
import { findingProblems } from '../compile/findings.ts'
import { secretRefProblems } from '../compile/extensions.ts'
import { certificateProblems } from '../compile/gateways.ts'
import { publishedAddresses } from '../compile/addresses.ts'
import { printTable } from '../compile/print.ts'
import { formatProblem } from '../resources/problem.ts'
import { CONTROLLER_NAME } from './runtime.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import type { Snapshot } from '../resources/snapshot.ts'

export interface Output {
  readonly stdout: (line: string) => void
  readonly stderr: (line: string) => void
}

async function load(paths: readonly string[]): Promise<{ snapshot: Snapshot; problems: ConfigProblem[]; inReadingOrder: (list: readonly ConfigProblem[]) => ConfigProblem[] }> {
  const set = await readConfigSet(paths)
  const snapshot = buildSnapshot(set.docs, set.problems)
  // Extension Secret (and Redis CA ConfigMap) references, checked against the
  // objects of the set: a missing key always, a missing Secret (ConfigMap)
  // only if the set holds Secrets (ConfigMaps) at all (they are often created
  // apart from the manifests).
  const refs = [
    ...secretRefProblems(snapshot, { missingSecrets: snapshot.secrets.size > 0, missingConfigMaps: snapshot.configMaps.size > 0 }).map(r => r.problem),
    // And listener certificates that TLS cannot use (a key that does not match, unparsable PEM).
    ...certificateProblems(snapshot, snapshot.gateways.values(), Date.now()),
  ]
  // Print in reading order (files as listed, then document order), unreadable files in their place.
  const order = new Map(set.files.map((f, i) => [f, i]))
  const inReadingOrder = (list: readonly ConfigProblem[]): ConfigProblem[] => list
    .map((p, i) => ({ p, i }))
    .sort((a, b) => ((order.get(a.p.source.file) ?? -1) - (order.get(b.p.source.file) ?? -1)) || (a.p.source.doc - b.p.source.doc) || (a.i - b.i))
    .map((x) => x.p)
  return { snapshot, problems: inReadingOrder([...snapshot.problems, ...refs]), inReadingOrder }
}

function compileOffline(snapshot: Snapshot, gatewayClass: string, publishService: string | null): CompileResult {
  return compile(snapshot, { now: Date.now(), version: 1, gatewayClass, controllerName: CONTROLLER_NAME, publishService })
}

/**
 * `sallyport validate PATH...`: one line per problem on stdout
 * (`FILE:DOC: KIND NS/NAME: FIELD: MESSAGE`), a summary on stderr.
 * Exit code 1 if any problem is an error (the object, or the whole file, would
 * be ignored by `serve`, or traffic through it would fail), else 0 — warnings
 * alone pass.
 *
 * First each object on its own (schema and the specs' rules; an extension's
 * Secret reference, a listener's certificate Secret that TLS cannot use: see
 * load()). Then the valid objects are compiled as `routes` compiles them, and
 * what status says is wrong between them is printed too (compile/findings.ts):
 * a backendRef to nothing, a reference without its ReferenceGrant, a policy
 * whose target is not there, conflicting listeners, a parentRef to a Gateway
 * that is not in the files. A missing object is an error when the files hold
 * objects of its kind, a warning when they hold none (a set of files may be a
 * part of the configuration: routes without their Gateways, manifests whose
 * Secrets live in the cluster).
 */
export async function validateCommand(paths: readonly string[], out: Output, gatewayClass = 'sallyport'): Promise<number> {
  const { snapshot, problems: own, inReadingOrder } = await load(paths)
  const { findings } = compileOffline(snapshot, gatewayClass, null)
  const problems = [...own, ...inReadingOrder(findingProblems(snapshot, findings))]
  let errors = 0
  let warnings = 0
  for (const p of problems) {
    out.stdout(formatProblem(p))
    if (p.severity === 'error') errors++
    else warnings++
  }
  out.stderr(`${errors} error${errors === 1 ? '' : 's'}, ${warnings} warning${warnings === 1 ? '' : 's'}`)
  return errors > 0 ? 1 : 0
}

/**
 * `sallyport routes PATH...`: the compiled table as `serve` would run it,
 * problems on stderr. `publishService` (`--publish-service`): the Gateways'
 * addresses, when the files hold that Service.
 */
export async function routesCommand(paths: readonly string[], gatewayClass: string, out: Output, publishService: string | null = null): Promise<number> {
  const { snapshot, problems } = await load(paths)
  for (const p of problems) out.stderr(formatProblem(p))
  const published = publishedAddresses(snapshot, publishService)
  if (published?.problem != null) out.stderr(formatProblem(published.problem))
  const { table, status } = compileOffline(snapshot, gatewayClass, publishService)
  out.stdout(printTable(table, status).replace(/\n$/, ''))
  return 0
}
