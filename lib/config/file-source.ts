// The file source: manifests from local files and directories, watched.
//
// Any change under a watched path means "re-read the whole set": editors save by
// writing a new file and renaming it over the old one (vim's backupcopy, see
// Envoy Gateway internal/provider/file/file.go), so events on single files are
// not trustworthy; we watch directories and debounce.
//
// Atomicity: a reload either takes every file as it now is, or nothing. If one
// file cannot be read or parsed, the last good configuration keeps serving, the
// error is logged with file and line, and the failure is counted. The first
// load is the exception: with no last good configuration, serving the readable
// files (and reporting the broken one) beats refusing to start — one typo in one
// team's file must not keep the gateway from coming up.

import { SerialPasses } from './serial-passes.ts'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { logger } from '../observe/log.ts'
import { configReloadFailures } from '../observe/metrics.ts'
import { formatProblem } from '../resources/problem.ts'
import { parseManifests } from './parse.ts'
import { DocumentCache, buildSnapshot, type SourcedDoc } from './snapshot-builder.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import type { Snapshot } from '../resources/snapshot.ts'

const log = logger('file-source')

const EXTENSIONS = ['.yaml', '.yml', '.json']

export interface FileSourceOptions {
  /** Milliseconds of quiet after the last change before re-reading (default 200). */
  readonly debounceMs?: number
  /** Watch for changes (default true). */
  readonly watch?: boolean
}

/** The files of a configuration set, read and parsed. */
export interface ConfigSet {
  readonly docs: SourcedDoc[]
  /** Files that could not be read or parsed (one problem each, naming file and line). */
  readonly problems: ConfigProblem[]
  /** Hash over every file's name and content. */
  readonly hash: string
  readonly files: readonly string[]
  /** Files with nothing but whitespace in them. */
  readonly emptyFiles: readonly string[]
}

/**
 * How long a file that held objects and is now empty is given to be written
 * before its emptiness is applied. A save that truncates the file, then writes
 * it (`cat > file`, a copy in place, a slow writer), would otherwise remove
 * every object in it — close its listeners — for as long as the write takes.
 */
export const EMPTY_SETTLE_MS = 1000

/**
 * Read every manifest under `paths` (files, or directories searched
 * recursively for .yaml/.yml/.json, hidden entries skipped), in sorted order.
 */
export async function readConfigSet(paths: readonly string[]): Promise<ConfigSet> {
  const files: string[] = []
  const problems: ConfigProblem[] = []
  for (const p of paths) {
    try {
      files.push(...await listManifests(p))
    } catch (err) {
      problems.push(readProblem(p, err))
    }
  }
  const hash = createHash('sha256')
  const docs: SourcedDoc[] = []
  const emptyFiles: string[] = []
  for (const file of files) {
    let text: string
    try {
      text = await fsp.readFile(file, 'utf8')
    } catch (err) {
      // A file renamed away between listing and reading: the watcher fires again.
      problems.push(readProblem(file, err))
      continue
    }
    hash.update(file).update('\0').update(text).update('\0')
    if (text.trim() === '') emptyFiles.push(file)
    const parsed = parseManifests(file, text)
    problems.push(...parsed.problems)
    docs.push(...parsed.docs)
  }
  for (const p of problems) hash.update(formatProblem(p))
  return { docs, problems, hash: hash.digest('hex'), files, emptyFiles }
}

async function listManifests(p: string): Promise<string[]> {
  const stat = await fsp.stat(p)
  if (!stat.isDirectory()) return [p]
  const entries = await fsp.readdir(p, { recursive: true, withFileTypes: true })
  const out: string[] = []
  for (const e of entries) {
    if (!e.isFile() && !e.isSymbolicLink()) continue
    const full = path.join(e.parentPath, e.name)
    const rel = path.relative(p, full)
    // Hidden files and directories (.git, editor swap and lock files) are not configuration.
    if (rel.split(path.sep).some((part) => part.startsWith('.'))) continue
    if (!EXTENSIONS.includes(path.extname(e.name).toLowerCase())) continue
    out.push(full)
  }
  return out.sort()
}

function readProblem(file: string, err: unknown): ConfigProblem {
  const code = (err as NodeJS.ErrnoException).code
  return {
    source: { file, doc: 0 }, kind: '', namespace: '', name: '', field: '',
    message: `cannot read: ${code ?? (err instanceof Error ? err.message : String(err))}`, severity: 'error',
  }
}

export type SnapshotListener = (snapshot: Snapshot) => void | Promise<void>

export class FileSource {
  readonly #paths: readonly string[]
  readonly #debounceMs: number
  readonly #watch: boolean
  #watchers = new Map<string, fs.FSWatcher>()
  #timer: NodeJS.Timeout | null = null
  /** Hash of the last set read (good or not), so one broken state is reported once. */
  #seenHash: string | null = null
  /** Hash of the last set handed on: equal content is never emitted twice. */
  #emittedHash: string | null = null
  /** Issue 11: a reload validates and reads only the documents that changed. */
  readonly #docs = new DocumentCache()
  /** The files of the last reload not applied (unreadable, unparsable); empty once a set is applied. */
  #rejected: readonly ConfigProblem[] = []
  #onSnapshot: SnapshotListener | null = null
  /** Files that held documents in the set last handed on. */
  #filesWithDocs = new Set<string>()
  /** Files that became empty, and since when (EMPTY_SETTLE_MS). */
  #emptySince = new Map<string, number>()
  /** The reload in progress; a change during it schedules one more after it. */
  readonly #passes = new SerialPasses(() => this.#reload(false), () => !this.#closed)
  #closed = false

  constructor(paths: readonly string[], options: FileSourceOptions = {}) {
    this.#paths = paths.map((p) => path.resolve(p))
    this.#debounceMs = options.debounceMs ?? 200
    this.#watch = options.watch ?? true
  }

  /** First load (resolves after `onSnapshot` has handled it), then watch. */
  async start(onSnapshot: SnapshotListener): Promise<void> {
    this.#onSnapshot = onSnapshot
    this.#syncWatches()
    await this.#reload(true)
  }

  /** Re-read now (tests, SIGHUP). */
  reload(): Promise<void> {
    return this.#schedule()
  }

  /** Why the files on disk are not what serves: the problems of the last reload, kept out (none once one applies). */
  rejected(): readonly ConfigProblem[] {
    return this.#rejected
  }

  close(): void {
    this.#closed = true
    if (this.#timer !== null) clearTimeout(this.#timer)
    for (const w of this.#watchers.values()) w.close()
    this.#watchers.clear()
  }

  // Plain (non-recursive) inotify watches on every directory of the set: Node's
  // recursive mode on Linux follows files individually and loses them across a
  // rename-save. The set of watched directories is re-synced after each read, so
  // new subdirectories are picked up.
  #syncWatches(): void {
    if (!this.#watch || this.#closed) return
    const wanted = new Set<string>()
    for (const p of this.#paths) {
      let isDir = false
      try { isDir = fs.statSync(p).isDirectory() } catch { /* missing: watch the parent for it to appear */ }
      if (!isDir) { wanted.add(path.dirname(p)); continue }
      wanted.add(p)
      try {
        for (const e of fs.readdirSync(p, { recursive: true, withFileTypes: true })) {
          if (!e.isDirectory()) continue
          const full = path.join(e.parentPath, e.name)
          if (!path.relative(p, full).split(path.sep).some((part) => part.startsWith('.'))) wanted.add(full)
        }
      } catch { /* vanished meanwhile: the next event re-syncs */ }
    }
    for (const [dir, w] of this.#watchers) {
      if (!wanted.has(dir)) { w.close(); this.#watchers.delete(dir) }
    }
    for (const dir of wanted) {
      if (this.#watchers.has(dir)) continue
      try {
        const w = fs.watch(dir, { persistent: false }, () => this.#changed())
        w.on('error', () => { w.close(); this.#watchers.delete(dir); this.#changed() })
        this.#watchers.set(dir, w)
      } catch (err) {
        log.warn({ dir, err }, 'cannot watch configuration directory; changes in it will not be picked up')
      }
    }
  }

  #changed(): void {
    if (this.#closed) return
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = setTimeout(() => {
      this.#timer = null
      void this.#schedule()
    }, this.#debounceMs)
  }

  #schedule(): Promise<void> {
    return this.#passes.request()
  }

  /**
   * Whether to hold this set back: a file that held objects is empty now, and
   * has not been for EMPTY_SETTLE_MS yet (a re-read is scheduled for then). An
   * emptiness that lasts is applied, with a warning naming the files.
   */
  #settling(set: ConfigSet): boolean {
    const now = Date.now()
    const emptied = set.emptyFiles.filter((f) => this.#filesWithDocs.has(f))
    for (const f of [...this.#emptySince.keys()]) if (!emptied.includes(f)) this.#emptySince.delete(f)
    let wait = 0
    for (const f of emptied) {
      const since = this.#emptySince.get(f)
      if (since === undefined) this.#emptySince.set(f, now)
      wait = Math.max(wait, (since ?? now) + EMPTY_SETTLE_MS - now)
    }
    if (wait > 0) {
      log.info({ files: emptied }, 'a configuration file became empty; waiting for it to be written before applying')
      setTimeout(() => { void this.#schedule() }, wait).unref()
      return true
    }
    if (emptied.length > 0) log.warn({ files: emptied }, 'configuration file is empty: the objects it held are removed')
    this.#emptySince.clear()
    return false
  }

  async #reload(first: boolean): Promise<void> {
    if (this.#closed) return
    if (!first) this.#syncWatches()
    const set = await readConfigSet(this.#paths)
    if (set.hash === this.#seenHash) return
    if (!first && this.#settling(set)) return
    this.#seenHash = set.hash
    if (set.problems.length > 0) {
      for (const p of set.problems) {
        log.error({ file: p.source.file, doc: p.source.doc, problem: formatProblem(p) }, 'cannot load configuration file')
        const reason = p.message.startsWith('cannot read') ? 'read' : 'parse'
        configReloadFailures.inc({ source: 'file', reason })
      }
      if (!first) {
        log.warn({ files: set.problems.map((p) => p.source.file) }, 'keeping the last good configuration')
        this.#rejected = set.problems
        return
      }
    }
    this.#rejected = []
    // Back to the content already serving (a broken save, then undo): nothing to do.
    if (set.hash === this.#emittedHash) return
    this.#emittedHash = set.hash
    this.#filesWithDocs = new Set(set.docs.map((d) => d.source.file))
    const snapshot = buildSnapshot(set.docs, set.problems, this.#docs)
    if (this.#onSnapshot === null || this.#closed) return
    try {
      await this.#onSnapshot(snapshot)
    } catch (err) {
      log.error({ err }, 'applying configuration failed')
    }
  }
}
