// The file source: manifests from local files and directories, watched.
//
// Any change under a watched path means "re-read the whole set": editors save by
// writing a new file and renaming it over the old one (vim's backupcopy, see
// Envoy Gateway internal/provider/file/file.go), so events on single files are
// not trustworthy; we watch directories and debounce.
//
// Each file on its own: a reload takes every file as it now is, except one that
// cannot be read or parsed (a typo, a save caught half-written, a dangling
// link), which keeps the objects of its last version that could be — one team's
// typo holds back neither that team's objects nor any other file's changes.
// The error is logged with file and line once, counted, and listed by
// rejected(). A file that was never read whole (broken since startup, or added
// broken) gives what can be read of it, as the first load does; a path that
// cannot be listed (a --config directory gone) keeps the files last read under it.

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
export const RECHECK_MS = 2000

interface Watch {
  readonly watcher: fs.FSWatcher
  /** The directory's device and inode when the watch was made. */
  readonly dev: number
  readonly ino: number
  /** Its birth time: ext4 gives a directory made right after one was removed the same inode number. */
  readonly born: number
  /** An event said the directory itself went away. */
  stale: boolean
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
  /** Files that could not be read or parsed, paths that could not be listed (one problem each, naming file and line). */
  readonly problems: ConfigProblem[]
  /** Hash over every file's name and content, and the problems. */
  readonly hash: string
  readonly files: readonly string[]
  /** Each file of `files`, read. */
  readonly reads: ReadonlyMap<string, FileRead>
  /** Paths (a --config path, a directory under one) that could not be listed. */
  readonly unlisted: readonly ConfigProblem[]
  /** Warnings (also in `problems`): a --config directory with no manifest in it. */
  readonly warnings: readonly ConfigProblem[]
}

/** One file, read and parsed. */
export interface FileRead {
  readonly docs: readonly SourcedDoc[]
  /** Why it could not be read, or parsed whole (none: it was). */
  readonly problems: readonly ConfigProblem[]
  /** Hash of its content ('' if unreadable). */
  readonly hash: string
  /** Nothing but whitespace in it. */
  readonly empty: boolean
}

/**
 * How long a file that held objects and is now empty is given to be written
 * before its emptiness is applied. A save that truncates the file, then writes
 * it (`cat > file`, a copy in place, a slow writer), would otherwise remove
 * every object in it — close its listeners — for as long as the write takes.
 */
export const EMPTY_SETTLE_MS = 1000

/**
 * The largest configuration file read: eight times what one ConfigMap (or any
 * Kubernetes object) may hold, so no real manifest file comes near it. A file
 * past it is a read problem (its last good objects keep serving), never read:
 * a log or dump saved as .yaml, a link to a device without end (/dev/zero),
 * would otherwise fill the heap and stall the event loop at each reload.
 */
export const MAX_FILE_BYTES = 8 * 1024 * 1024

/**
 * Read every manifest under `paths` (files, or directories searched
 * recursively for .yaml/.yml/.json, hidden entries skipped), in sorted order.
 */
export async function readConfigSet(paths: readonly string[]): Promise<ConfigSet> {
  const files: string[] = []
  const unlisted: ConfigProblem[] = []
  const warnings: ConfigProblem[] = []
  for (const p of paths) {
    try {
      const listed = await listManifests(p)
      files.push(...listed.files)
      for (const f of listed.failed) unlisted.push(readProblem(f.dir, f.err))
      // Most likely the wrong directory, or a copy not done yet: say so rather than serve nothing in silence.
      if (listed.files.length === 0 && listed.failed.length === 0) {
        warnings.push({
          source: { file: p, doc: 0 }, kind: '', namespace: '', name: '', field: '',
          message: `no configuration file (${EXTENSIONS.join(', ')}) found`, severity: 'warning',
        })
      }
    } catch (err) {
      unlisted.push(readProblem(p, err))
    }
  }
  const problems: ConfigProblem[] = [...unlisted, ...warnings]
  const hash = createHash('sha256')
  const docs: SourcedDoc[] = []
  const reads = new Map<string, FileRead>()
  for (const file of files) {
    let text: string
    try {
      text = await readManifestText(file)
    } catch (err) {
      // A file renamed away between listing and reading: the watcher fires again.
      const problem = readProblem(file, err)
      problems.push(problem)
      reads.set(file, { docs: [], problems: [problem], hash: '', empty: false })
      continue
    }
    const fileHash = createHash('sha256').update(text).digest('hex')
    hash.update(file).update('\0').update(fileHash).update('\0')
    const parsed = parseManifests(file, text)
    problems.push(...parsed.problems)
    docs.push(...parsed.docs)
    reads.set(file, { docs: parsed.docs, problems: parsed.problems, hash: fileHash, empty: text.trim() === '' })
  }
  for (const p of problems) hash.update(formatProblem(p))
  return { docs, problems, hash: hash.digest('hex'), files, reads, unlisted, warnings }
}

/** Why a file is not read at all (a read problem: `cannot read: REASON`). */
class UnreadableFile extends Error {}

/**
 * A manifest file's text, read within MAX_FILE_BYTES. Only regular files are
 * read: a FIFO (opened without waiting for a writer, which would hold this
 * reload and every later one for ever) or a device is refused.
 */
async function readManifestText(file: string): Promise<string> {
  const handle = await fsp.open(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK)
  try {
    const st = await handle.stat()
    if (!st.isFile()) throw new UnreadableFile('not a regular file')
    const tooLarge = `larger than ${MAX_FILE_BYTES / (1024 * 1024)} MiB; not read`
    if (st.size > MAX_FILE_BYTES) throw new UnreadableFile(tooLarge)
    // The file may grow between stat and read: read at most one byte past the bound.
    const buf = Buffer.allocUnsafe(Math.min(st.size + 1, MAX_FILE_BYTES + 1))
    let filled = 0
    for (;;) {
      if (filled === buf.length) {
        if (filled > MAX_FILE_BYTES) throw new UnreadableFile(tooLarge)
        return Buffer.concat([buf, await readRest(handle, filled, tooLarge)]).toString('utf8')
      }
      const { bytesRead } = await handle.read(buf, filled, buf.length - filled, null)
      if (bytesRead === 0) return buf.toString('utf8', 0, filled)
      filled += bytesRead
    }
  } finally {
    await handle.close()
  }
}

/** What a file grown since its stat holds past `offset`, within MAX_FILE_BYTES in all. */
async function readRest(handle: fsp.FileHandle, offset: number, tooLarge: string): Promise<Buffer> {
  const chunks: Buffer[] = []
  let total = offset
  for (;;) {
    const chunk = Buffer.allocUnsafe(64 * 1024)
    const { bytesRead } = await handle.read(chunk, 0, chunk.length, null)
    if (bytesRead === 0) break
    total += bytesRead
    if (total > MAX_FILE_BYTES) throw new UnreadableFile(tooLarge)
    chunks.push(chunk.subarray(0, bytesRead))
  }
  return Buffer.concat(chunks)
}

async function listManifests(p: string): Promise<{ files: string[]; failed: Array<{ dir: string; err: unknown }> }> {
  const stat = await fsp.stat(p)
  if (!stat.isDirectory()) return { files: [p], failed: [] }
  return walk(p)
}

/**
 * The manifests and directories under `root`, hidden entries skipped.
 * Symbolic links are followed, to files and to directories alike; a linked
 * directory already read, or one holding the link (`self -> .`, `up -> ..`),
 * is not read again. Files are sorted; directories come in the order read.
 */
function walk(root: string): { files: string[]; dirs: string[]; failed: Array<{ dir: string; err: unknown }> } {
  const files: string[] = []
  const dirs: string[] = []
  const failed: Array<{ dir: string; err: unknown }> = []
  const read = new Set<string>()
  const visit = (dir: string, real: string): void => {
    read.add(real)
    dirs.push(dir)
    // The root must be readable (its error is the caller's); a subdirectory that vanished meanwhile is
    // skipped, one that cannot be read is reported (its files keep their objects, see FileSource).
    let entries: fs.Dirent[]
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    } catch (err) {
      if (dir === root) throw err
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') failed.push({ dir, err })
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
  return { files: files.sort(), dirs, failed }
}

function readProblem(file: string, err: unknown): ConfigProblem {
  const code = err instanceof UnreadableFile ? undefined : (err as NodeJS.ErrnoException).code
  return {
    source: { file, doc: 0 }, kind: '', namespace: '', name: '', field: '',
    message: `cannot read: ${code ?? (err instanceof Error ? err.message : String(err))}`, severity: 'error',
  }
}

export type SnapshotListener = (snapshot: Snapshot) => void | Promise<void>

/** The documents one file gives a snapshot, and the hash of the content they came from. */
interface Taken {
  readonly docs: readonly SourcedDoc[]
  readonly hash: string
}

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
  /** Hash of the last set read (good or not): an unchanged set is not looked at again. */
  #seenHash: string | null = null
  /** Hash of what the last snapshot handed on was built from: equal content is never emitted twice. */
  #emittedHash: string | null = null
  /** Issue 11: a reload validates and reads only the documents that changed. */
  readonly #docs = new DocumentCache()
  /** Each file's last version read whole, whose documents serve: what a file that breaks keeps. */
  #lastGood = new Map<string, Taken>()
  /** The problems of the files that serve their last good version instead of what is on disk. */
  #rejected: readonly ConfigProblem[] = []
  /** Per file or path, its problems as last reported: each broken state is logged and counted once. */
  #reported = new Map<string, string>()
  #onSnapshot: SnapshotListener | null = null
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

  /** Why files on disk are not what serves: the problems of the files that serve their last good version instead. */
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
  // it was made on (and notes an event on the directory itself: deleted, moved
  // away), and a sync re-makes any whose path now names another or that saw its
  // directory go; the re-check below catches what no watched directory sees (a
  // --config symlink, or a link higher up the path, swapped to a new target).
  // The parents of --config paths are not watched: every write to any file
  // beside the configuration (a log, say) would wake the gateway, ~3 µs each.
  #syncWatches(): void {
    if (!this.#watch || this.#closed) return
    /** The directories to watch (every event in each matters). */
    const wanted = new Set<string>()
    for (const p of this.#paths) {
      let isDir = false
      try {
        isDir = fs.statSync(p).isDirectory()
      } catch {
        this.#unwatchable.add(p) // missing: the re-check reads it once it appears
        continue
      }
      // A file's directory entirely: a ConfigMap mounted as files swaps its ..data link there.
      if (!isDir) { wanted.add(path.dirname(p)); continue }
      try {
        for (const dir of walk(p).dirs) wanted.add(dir)
      } catch { /* vanished meanwhile: its own watch saw it go */ }
    }
    for (const [dir, w] of this.#watchers) {
      const kept = wanted.has(dir)
      if (!kept || !sameInode(dir, w)) {
        if (kept) log.info({ dir }, 'configuration directory replaced; watching the new one')
        w.watcher.close()
        this.#watchers.delete(dir)
      }
    }
    for (const dir of wanted) {
      if (this.#watchers.has(dir)) continue
      try {
        // The inode first: one replaced between the two calls is caught by the next sync, never missed.
        const st = fs.statSync(dir)
        const self = path.basename(dir)
        const watcher = fs.watch(dir, { persistent: false }, (_event, filename) => {
          // An event on the directory itself (deleted, moved away) carries its own name: the watch is
          // over, though no 'error' says so. (A child of the same name makes this a harmless re-watch.)
          if (filename === self) entry.stale = true
          this.#changed()
        })
        const entry: Watch = { watcher, dev: st.dev, ino: st.ino, born: st.birthtimeMs, stale: false }
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
   * How long a file that held objects and is empty now is still given to be
   * written (0: its emptiness is applied, with a warning naming it).
   */
  #settleWait(file: string, now: number): number {
    const since = this.#emptySince.get(file) ?? now
    this.#emptySince.set(file, since)
    const wait = since + EMPTY_SETTLE_MS - now
    if (wait > 0) {
      if (since === now) log.info({ file }, 'a configuration file became empty; waiting for it to be written before applying')
      return wait
    }
    log.warn({ file }, 'configuration file is empty: the objects it held are removed')
    this.#emptySince.delete(file)
    return 0
  }

  /** Log and count a file's (or path's) problems, once per broken state. */
  #report(file: string, problems: readonly ConfigProblem[], held: boolean): void {
    const text = problems.map(formatProblem).join('\n')
    if (this.#reported.get(file) === text) return
    this.#reported.set(file, text)
    for (const p of problems) {
      log.error({ file: p.source.file, doc: p.source.doc, problem: formatProblem(p) },
        held ? 'cannot load configuration file; its last good objects keep serving' : 'cannot load configuration file')
      const reason = p.message.startsWith('cannot read') ? 'read' : 'parse'
      configReloadFailures.inc({ source: 'file', reason })
    }
  }

  async #reload(first: boolean): Promise<void> {
    if (this.#closed) return
    if (!first) this.#syncWatches()
    const set = await readConfigSet(this.#paths)
    if (set.hash === this.#seenHash) return
    const now = Date.now()
    /** What each file gives this snapshot, in file order. */
    const taken = new Map<string, Taken>()
    const problems: ConfigProblem[] = [...set.warnings]
    const held: ConfigProblem[] = []
    const lastGood = new Map<string, Taken>()
    const broken = new Set<string>()
    let settle = 0
    for (const file of set.files) {
      const read = set.reads.get(file)
      if (read === undefined) continue
      const last = this.#lastGood.get(file)
      if (read.problems.length > 0) {
        broken.add(file)
        this.#report(file, read.problems, last !== undefined)
        if (last !== undefined) {
          taken.set(file, last)
          lastGood.set(file, last)
          held.push(...read.problems)
        } else {
          // Never read whole: what can be read of it, as on the first load.
          taken.set(file, { docs: read.docs, hash: read.hash })
          problems.push(...read.problems)
        }
        continue
      }
      if (read.empty && last !== undefined && last.docs.length > 0) {
        const wait = this.#settleWait(file, now)
        if (wait > 0) {
          settle = Math.max(settle, wait)
          taken.set(file, last)
          lastGood.set(file, last)
          continue
        }
      } else {
        this.#emptySince.delete(file)
      }
      const good = { docs: read.docs, hash: read.hash }
      taken.set(file, good)
      lastGood.set(file, good)
    }
    // A path that cannot be listed: the files last read under it keep their objects.
    for (const p of set.unlisted) {
      const dir = p.source.file
      broken.add(dir)
      let kept = false
      for (const [file, last] of this.#lastGood) {
        if (taken.has(file) || !(file === dir || file.startsWith(dir + path.sep))) continue
        taken.set(file, last)
        lastGood.set(file, last)
        kept = true
      }
      this.#report(dir, [p], kept)
      if (kept) held.push(p)
      else problems.push(p)
    }
    for (const f of [...this.#reported.keys()]) if (!broken.has(f)) this.#reported.delete(f)
    for (const f of [...this.#emptySince.keys()]) if (!taken.has(f)) this.#emptySince.delete(f)
    if (settle > 0) setTimeout(() => { void this.#schedule() }, settle).unref()
    // A file still settling: the re-read then must not be skipped as "seen".
    this.#seenHash = settle > 0 ? null : set.hash
    this.#lastGood = lastGood
    this.#rejected = held
    if (held.length > 0) log.warn({ files: held.map((p) => p.source.file) }, 'these files keep their last good objects; the others apply')

    const files = [...taken.keys()].sort()
    const hash = createHash('sha256')
    for (const file of files) hash.update(file).update('\0').update(taken.get(file)?.hash ?? '').update('\0')
    for (const p of problems) hash.update(formatProblem(p)).update('\0')
    const digest = hash.digest('hex')
    // What serves already (a broken save, then undo; a break that keeps the last good objects): nothing to do.
    if (digest === this.#emittedHash) return
    this.#emittedHash = digest
    const docs = files.flatMap((f) => taken.get(f)?.docs ?? [])
    const snapshot = buildSnapshot(docs, problems, this.#docs)
    if (this.#onSnapshot === null || this.#closed) return
    try {
      await this.#onSnapshot(snapshot)
    } catch (err) {
      log.error({ err }, 'applying configuration failed')
    }
  }
}
