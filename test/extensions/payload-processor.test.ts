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

// A card number is often written with what follows it: a CVV, an expiry. The
// card pattern took the longest digit run (up to 19 digits), the Luhn check
// failed on card + CVV, and the card passed unredacted (and undenied).
t.test('card: a number followed or preceded by other digit groups is still found', async (t) => {
  const redactCard = compileRules({ redact: { patterns: ['card'] } })!
  const denyCard = compileRules({ deny: [{ pattern: 'card', reason: 'no cards' }] })!
  const cases: Array<[string, string]> = [
    ['4111 1111 1111 1111 123', '[REDACTED] 123'],
    ['card 4111111111111111 12/25', 'card [REDACTED] 12/25'],
    ['4111-1111-1111-1111-99', '[REDACTED]-99'],
    ['order 12 4111 1111 1111 1111', 'order 12 [REDACTED]'],
    ['5500 0000 0000 0004 cvv 123', '[REDACTED] cvv 123'],
    ['4111 1111 1111 1111', '[REDACTED]'],
    ['ref 12 34 56 4111 1111 1111 1111', 'ref 12 34 56 [REDACTED]'],
    ['two: 4111 1111 1111 1111 5500 0000 0000 0004.', 'two: [REDACTED] [REDACTED].'],
  ]
  for (const [text, want] of cases) {
    t.equal(bodyOf(run(redactCard, JSON.stringify({ m: text }))), JSON.stringify({ m: want }), text)
    t.same(run(denyCard, JSON.stringify({ m: text })), { deny: { status: 403, reason: 'no cards' } }, `${text}: denied`)
  }
  // Digit runs with no group passing Luhn stay as they are.
  t.equal(run(redactCard, JSON.stringify({ m: '1234 5678 9012 3456 789' })), undefined, 'no card in it')
  t.equal(run(redactCard, JSON.stringify({ m: '41111111111111111' })), undefined, 'one unbroken run is read whole')
  t.equal(run(redactCard, JSON.stringify({ m: 'id 4111111111111111abc' })), undefined, 'a run going on into a word is no card')
  t.equal(run(redactCard, JSON.stringify({ m: '1 '.repeat(100000) + 'x' })), undefined, 'a long run of groups is read once')
})

// A card or phone number is often sent as a JSON number, not a string: the
// patterns read numbers as written too. A redacted number becomes the
// replacement string (a number cannot hold it); one that matches nothing keeps
// its text; a deny sees numbers as it sees strings.
t.test('numbers are read by the patterns as they are written', async (t) => {
  const redactCard = compileRules({ redact: { patterns: ['card'] } })!
  const denyCard = compileRules({ deny: [{ pattern: 'card', reason: 'no cards' }] })!
  t.equal(bodyOf(run(redactCard, '{"card":4111111111111111,"qty":2,"big":12345678901234567890}')), '{"card":"[REDACTED]","qty":2,"big":12345678901234567890}', 'a card number sent as a number')
  t.equal(run(redactCard, '{"qty":2,"price":1.10,"id":12345678901234567890}'), undefined, 'numbers that match nothing: the body passes as sent')
  t.same(run(denyCard, '{"payment":{"pan":4111111111111111}}'), { deny: { status: 403, reason: 'no cards' } }, 'a deny sees a number')
  t.equal(run(denyCard, '{"n":[1,2,3]}'), undefined, 'and lets other numbers be')
  const scoped = compileRules({ redact: { patterns: ['card'], scope: ['$.pay'] } })!
  t.equal(bodyOf(run(scoped, '{"pay":{"pan":4111111111111111},"other":4111111111111111}')), '{"pay":{"pan":"[REDACTED]"},"other":4111111111111111}', 'within a scope only')
  const exact = compileRules({ redact: { patterns: ['card'], scope: ['$.pan'] } })!
  t.equal(bodyOf(run(exact, '{"pan":4111111111111111}')), '{"pan":"[REDACTED]"}', 'a scope selecting the number itself')
})
