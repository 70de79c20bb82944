// bench/conformance/authproxy.mjs: loopback proxy for bench/conformance.sh: the conformance runner has no option to
// send a bearer token to the server under test, so this adds
// "Authorization: Bearer <token>" and forwards everything else unchanged
// (method, path, streamed bodies, all other headers). A Host or Origin naming
// this proxy's own loopback port is rewritten to soda-mcpd's port (soda checks
// the port too); any other Host/Origin (the DNS-rebinding probes) passes as is.
import http from 'node:http';
import fs from 'node:fs';

const token = fs.readFileSync(process.env.TOKEN_FILE, 'utf8').trim();
const upstream = Number(process.env.UPSTREAM);
const listen = Number(process.env.LISTEN);

http
  .createServer((req, res) => {
    const headers = { ...req.headers, authorization: `Bearer ${token}` };
    const self = new RegExp(`^((?:https?://)?(?:127\\.0\\.0\\.1|localhost|\\[::1\\])):${listen}$`, 'i');
    for (const h of ['host', 'origin']) {
      if (typeof headers[h] === 'string') headers[h] = headers[h].replace(self, `$1:${upstream}`);
    }
    const up = http.request(
      { host: '127.0.0.1', port: upstream, method: req.method, path: req.url, headers },
      (ur) => {
        res.writeHead(ur.statusCode, ur.rawHeaders);
        ur.pipe(res);
      }
    );
    up.on('error', (e) => {
      if (!res.headersSent) res.writeHead(502);
      res.end(String(e));
    });
    req.pipe(up);
    res.on('close', () => up.destroy());
  })
  .listen(listen, '127.0.0.1');
