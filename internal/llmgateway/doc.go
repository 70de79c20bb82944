// Package llmgateway is the host side of a sandbox's model traffic: a
// loopback HTTP gateway, relayed into the sandbox like a granted MCP
// server, through which an agent reaches its model provider without ever
// holding the provider's key.
//
// The sandbox gets a placeholder key, random per run, in the provider's
// usual variable (ANTHROPIC_API_KEY, OPENAI_API_KEY) and the gateway's
// address in the provider's base-URL variable. Each request names its
// provider by the first element of its path (/anthropic/v1/messages). The
// gateway refuses a request that does not carry the run's placeholder
// (it is never forwarded), strips the placeholder, adds the real
// credential, and forwards the request over TLS, with the usual
// certificate checks, to the one upstream of that provider. Responses,
// server-sent event streams included, pass through unbuffered.
//
// Every request is bounded (size of the request body and of the response,
// concurrent requests, time to the upstream's headers) and recorded as an
// Event: method, provider, path without its query, status, bytes,
// duration and the token usage the provider reported, read from its JSON
// or event-stream response; headers and bodies are never logged. With a
// budget, requests are refused once the tokens spent reach it.
package llmgateway
