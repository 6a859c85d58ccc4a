// CredentialInjector as a query parameter: the client's own value under that
// name goes (however it spelled the name), and the rest of its query reaches
// the upstream byte for byte — not re-serialized as a form, which turned
// `a%20b` into `a+b`, `flag` into `flag=` and `~` into `%7E`.
import t from 'tap'
import { setQueryParam } from '../../lib/extensions/credential-injector.ts'

t.test('setQueryParam keeps the rest of the query as sent', async (t) => {
  t.equal(setQueryParam('/p', 'api_key', 'k1'), '/p?api_key=k1')
  t.equal(setQueryParam('/p?', 'api_key', 'k1'), '/p?api_key=k1')
  t.equal(setQueryParam('/p?q=a%20b&flag&x=~&z=a+b', 'api_key', 'k1'), '/p?q=a%20b&flag&x=~&z=a+b&api_key=k1', 'other parameters untouched')
  t.equal(setQueryParam('/p?a=1&b=2', 'api_key', 'k1'), '/p?a=1&b=2&api_key=k1')
})

t.test('setQueryParam replaces every client value of the name, however encoded', async (t) => {
  t.equal(setQueryParam('/p?api_key=mine&a=1', 'api_key', 'k1'), '/p?a=1&api_key=k1')
  t.equal(setQueryParam('/p?api%5Fkey=enc&api_key&api_key=x&a=1', 'api_key', 'k1'), '/p?a=1&api_key=k1', 'percent-encoded and bare forms go too')
  t.equal(setQueryParam('/p?api+key=x', 'api key', 'k1'), '/p?api%20key=k1', 'a form-encoded space in the name')
  t.equal(setQueryParam('/p?API_KEY=x', 'api_key', 'k1'), '/p?API_KEY=x&api_key=k1', 'names are case-sensitive')
  t.equal(setQueryParam('/p?bad=%E0%A4%A&api_key=x', 'api_key', 'k1'), '/p?bad=%E0%A4%A&api_key=k1', 'an undecodable pair is kept as sent')
})

t.test('setQueryParam encodes the credential', async (t) => {
  t.equal(setQueryParam('/p', 'key', 'a b+c&d=e/f'), '/p?key=a%20b%2Bc%26d%3De%2Ff')
})
