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
  /** Milliseconds between checks that each watched directory is still the one its path names (default RECHECK_MS; 0: none). */
  readonly recheckMs?: number
}

/** How often the watched directories are checked for having been replaced where no watch sees it. */
export const RECHECK_MS = 10_000

interface Watch {
  readonly watcher: fs.FSWatcher
  /** The directory's device and inode when the watch was made. */
  readonly dev: number
  readonly ino: number
  /** Its birth time: ext4 gives a directory made right after one was removed the same inode number. */
  readonly born: number
  /** An event said the directory itself went away. */
  stale: boolean
  /** The entry names whose events matter (null: all). */
  names: Set<string> | null
}

/** Whether `dir` still names the directory `w` watches. */
function sameInode(dir: string, w: Watch): boolean {
  try {
    if (w.stale) return false
    const st = fs.statSync(dir)
    return st.dev === w.dev && st.ino === w.ino && st.birthtimeMs === w.born
  } catch {
    return false
  }
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
  return walk(p).files
}

/**
 * The manifests and directories under `root`, hidden entries skipped.
 * Symbolic links are followed, to files and to directories alike; a linked
 * directory already read, or one holding the link (`self -> .`, `up -> ..`),
 * is not read again. Files are sorted; directories come in the order read.
 */
function walk(root: string): { files: string[]; dirs: string[] } {
  const files: string[] = []
  const dirs: string[] = []
  const read = new Set<string>()
  const visit = (dir: string, real: string): void => {
    read.add(real)
    dirs.push(dir)
    // The root must be readable (its error is the caller's); a subdirectory that vanished meanwhile is skipped.
    let entries: fs.Dirent[]
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    } catch (err) {
      if (dir === root) throw err
      return
    }
    for (const e of entries) {
      // Hidden files and directories (.git, editor swap and lock files, a ConfigMap's ..data) are not configuration.
      if (e.name.startsWith('.')) continue
      const full = path.join(dir, e.name)
      let isDir = e.isDirectory()
      if (e.isSymbolicLink()) {
        try {
          isDir = fs.statSync(full).isDirectory()
        } catch { /* dangling: listed below if it looks like a manifest, so its read problem is reported */ }
      }
      if (!isDir) {
        if ((e.isFile() || e.isSymbolicLink()) && EXTENSIONS.includes(path.extname(e.name).toLowerCase())) files.push(full)
        continue
      }
      let target: string
      try { target = fs.realpathSync(full) } catch { continue }
      if (read.has(target) || real === target || real.startsWith(target + path.sep)) {
        log.debug({ dir: full, target }, 'linked directory already read (or a loop); not read again')
        continue
      }
      visit(full, target)
    }
  }
  visit(root, fs.realpathSync(root))
  return { files: files.sort(), dirs }
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
  readonly #recheckMs: number
  #watchers = new Map<string, Watch>()
  /** Directories wanted but not watchable (missing); the re-check looks for them. */
  #unwatchable = new Set<string>()
  #recheckTimer: NodeJS.Timeout | null = null
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
    this.#recheckMs = options.recheckMs ?? RECHECK_MS
  }

  /** First load (resolves after `onSnapshot` has handled it), then watch. */
  async start(onSnapshot: SnapshotListener): Promise<void> {
    this.#onSnapshot = onSnapshot
    this.#syncWatches()
    if (this.#watch && this.#recheckMs > 0) {
      this.#recheckTimer = setInterval(() => this.#recheck(), this.#recheckMs)
      this.#recheckTimer.unref()
    }
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
    if (this.#recheckTimer !== null) clearInterval(this.#recheckTimer)
    for (const w of this.#watchers.values()) w.watcher.close()
    this.#watchers.clear()
  }

  // Plain (non-recursive) inotify watches on every directory of the set: Node's
  // recursive mode on Linux follows files individually and loses them across a
  // rename-save. The set of watched directories is re-synced before each read,
  // so new subdirectories are picked up.
  //
  // A watch follows an inode, the configuration a path: a directory replaced
  // under its name (`rm -rf DIR && cp -r NEW DIR`, `mv NEW DIR`, a symlink
  // swapped to a new target as git-sync does) leaves the watch on the old one,
  // and no event or error says so. So each watch remembers the device and inode
  // it was made on (and notes an event on the directory itself), and a sync
  // re-makes any whose path now names another or that saw its directory go; the
  // parent of each --config path is watched (for its name only, and for every
  // link of a symlink chain) so a replacement is seen when it happens; and the
  // re-check below catches what no watched directory sees (a link higher up the
  // path swapped).
  #syncWatches(): void {
    if (!this.#watch || this.#closed) return
    /** Directory → the entry names that matter there (null: all). */
    const wanted = new Map<string, Set<string> | null>()
    const want = (dir: string, name: string | null): void => {
      const names = wanted.get(dir)
      if (names === null) return
      if (name === null) wanted.set(dir, null)
      else if (names === undefined) wanted.set(dir, new Set([name]))
      else names.add(name)
    }
    for (const p of this.#paths) {
      // The path itself and each link it leads through: a replacement shows as an event on the name in its directory.
      let link = p
      for (let hop = 0; hop < 8; hop++) {
        want(path.dirname(link), path.basename(link))
        let target: string
        try {
          if (!fs.lstatSync(link).isSymbolicLink()) break
          target = path.resolve(path.dirname(link), fs.readlinkSync(link))
        } catch { break }
        link = target
      }
      let isDir = false
      try { isDir = fs.statSync(p).isDirectory() } catch { /* missing: its parent is watched for it to appear */ }
      // A file's directory entirely: a ConfigMap mounted as files swaps its ..data link there.
      if (!isDir) { want(path.dirname(p), null); continue }
      try {
        for (const dir of walk(p).dirs) want(dir, null)
      } catch { /* vanished meanwhile: its parent's watch fires */ }
    }
    for (const [dir, w] of this.#watchers) {
      const names = wanted.get(dir)
      if (names === undefined || !sameInode(dir, w)) {
        if (names !== undefined) log.info({ dir }, 'configuration directory replaced; watching the new one')
        w.watcher.close()
        this.#watchers.delete(dir)
        continue
      }
      w.names = names
    }
    for (const [dir, names] of wanted) {
      if (this.#watchers.has(dir)) continue
      try {
        // The inode first: one replaced between the two calls is caught by the next sync, never missed.
        const st = fs.statSync(dir)
        const self = path.basename(dir)
        const watcher = fs.watch(dir, { persistent: false }, (_event, filename) => {
          // An event on the directory itself (deleted, moved away) carries its own name: the watch is
          // over, though no 'error' says so. (A child of the same name makes this a harmless re-watch.)
          if (filename === self) entry.stale = true
          if (entry.names === null || filename === null || entry.names.has(filename) || entry.stale) this.#changed()
        })
        const entry: Watch = { watcher, dev: st.dev, ino: st.ino, born: st.birthtimeMs, names, stale: false }
        watcher.on('error', () => {
          watcher.close()
          if (this.#watchers.get(dir) === entry) this.#watchers.delete(dir)
          this.#changed()
        })
        this.#watchers.set(dir, entry)
        this.#unwatchable.delete(dir)
      } catch (err) {
        if (!this.#unwatchable.has(dir)) log.warn({ dir, err }, 'cannot watch configuration directory; changes in it will not be picked up')
        this.#unwatchable.add(dir)
      }
    }
  }

  /**
   * The periodic re-check: a watched directory whose path now names another
   * inode (or nothing), or one that could not be watched and now can, means a
   * re-read (which re-syncs the watches). A few stat calls, no reading.
   */
  #recheck(): void {
    if (this.#closed) return
    for (const [dir, w] of this.#watchers) {
      if (!sameInode(dir, w)) { this.#changed(); return }
    }
    for (const dir of this.#unwatchable) {
      if (fs.existsSync(dir)) { this.#changed(); return }
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
