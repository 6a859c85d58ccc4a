// PayloadProcessor on a JSON body with a name twice in one object. JSON.parse
// keeps the last; a reader that keeps the first (many do: RFC 8259 §4 leaves
// it open) would get a value the rules never saw. Such a body is checked as
// parsed and always written back from that parse, so the upstream gets what
// was checked: `{"m":"bob@example.com","m":"x"}` no longer passes byte for
// byte with its first value unredacted, and a deny is not dodged that way.
import t from 'tap'
import { compileRules, processJson } from '../../lib/extensions/payload-processor.ts'

const redactEmail = compileRules({ redact: { patterns: ['email'] } })!
const denyEmail = compileRules({ deny: [{ pattern: 'email', reason: 'no email' }] })!

const run = (rules: typeof redactEmail, text: string): unknown => processJson(rules, Buffer.from(text))
const bodyOf = (r: unknown): string | undefined => (r as { body?: Buffer } | undefined)?.body?.toString()

t.test('a name twice: the body sent is the one checked', async (t) => {
  t.equal(bodyOf(run(redactEmail, '{"m":"bob@example.com","m":"x"}')), '{"m":"x"}', 'the hidden first value does not pass')
  t.equal(bodyOf(run(redactEmail, '{"a":{"m":"bob@example.com","\\u006d":"x"}}')), '{"a":{"m":"x"}}', 'names compared as decoded')
  t.equal(bodyOf(run(redactEmail, '[{"m":"bob@example.com"},{"m":"x","m":"y"}]')), '[{"m":"[REDACTED]"},{"m":"y"}]')
  t.equal(bodyOf(run(redactEmail, '{"n":12345678901234567890,"n":1.10}')), '{"n":1.10}', 'numbers keep their text')
  t.same(run(denyEmail, '{"m":"bob@example.com","m":"x"}'), { body: Buffer.from('{"m":"x"}') }, 'the deny saw and sends the same value')
})

t.test('no name twice: unchanged bodies pass byte for byte', async (t) => {
  t.equal(run(redactEmail, '{ "m": "x", "o": {"m": "y"}, "a": [{"m":1},{"m":2}] }'), undefined, 'the same name in sibling objects is not a duplicate')
  t.equal(run(redactEmail, '{"m":"a\\"m\\":1","k":"\\\\"}'), undefined, 'quotes and backslashes inside strings')
  t.equal(run(redactEmail, '"just a string"'), undefined)
})
