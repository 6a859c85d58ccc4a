import t from 'tap'
import { Cancel, type CancelListener } from '../../lib/upstream/cancel.ts'

const recorder = (log: string[], name: string, also?: () => void): CancelListener => ({ handleEvent: () => { log.push(name); also?.() } })

t.test('abort: reason kept, listeners called once in order, later aborts ignored', async (t) => {
  const c = new Cancel()
  const log: string[] = []
  const a = recorder(log, 'a')
  c.addEventListener('abort', a)
  c.addEventListener('abort', recorder(log, 'b'))
  c.addEventListener('abort', a) // the same listener twice is kept once
  t.equal(c.aborted, false)
  t.equal(c.reason, undefined)
  const why = new Error('client went away')
  c.abort(why)
  t.equal(c.aborted, true)
  t.equal(c.reason, why)
  t.same(log, ['a', 'b'])
  c.abort(new Error('again'))
  t.equal(c.reason, why, 'the first reason stays')
  t.same(log, ['a', 'b'], 'no listener runs twice')
  c.addEventListener('abort', recorder(log, 'late'))
  t.same(log, ['a', 'b'], 'a listener added after abort is not called')
})

t.test('a removed listener is not called, also when an earlier listener removes it', async (t) => {
  const c = new Cancel()
  const log: string[] = []
  const gone = recorder(log, 'gone')
  const c2 = recorder(log, 'c')
  c.addEventListener('abort', gone)
  c.removeEventListener('abort', gone)
  c.addEventListener('abort', recorder(log, 'first', () => c.removeEventListener('abort', c2)))
  c.addEventListener('abort', c2)
  c.removeEventListener('abort', recorder(log, 'never added'))
  c.abort('x')
  t.same(log, ['first'])
})

t.test('a listener that throws does not keep the others from running; its error comes back', async (t) => {
  const c = new Cancel()
  const log: string[] = []
  c.addEventListener('abort', recorder(log, 'a', () => { throw new Error('boom') }))
  c.addEventListener('abort', recorder(log, 'b'))
  t.throws(() => c.abort('x'), /boom/)
  t.same(log, ['a', 'b'])
  t.equal(c.aborted, true)
})
