// The official TypeScript SDK's client against the gateway: list, call, answer an approval
// by elicitation, and report every result as one JSON line on stdout.
// Usage: node ts_client.mjs <sdk dir> <url> <token>
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [sdk, url, token] = process.argv.slice(2);
const load = (path) => import(pathToFileURL(join(sdk, "dist", "esm", path)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
const { ElicitRequestSchema } = await load("types.js");

const client = new Client(
  { name: "fastgate-ts-test", version: "1.0.0" },
  { capabilities: { elicitation: { form: {} } } },
);
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  return { action: "accept", content: { decision: "once" } };
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const out = (what, value) => console.log(JSON.stringify({ what, value }));
out("protocol", transport.protocolVersion ?? null);
out("tools", (await client.listTools()).tools.map((t) => t.name).sort());
out("echo", await client.callTool({ name: "echo", arguments: { text: "from typescript" } }));
out("deploy", await client.callTool({ name: "deploy", arguments: { target: "ts" } }));
out("forbidden", await client.callTool({ name: "forbidden", arguments: { text: "x" } }));
out("invalid", await client.callTool({ name: "echo", arguments: { text: 7 } }));
out("asked", asked);
await transport.terminateSession();
await client.close();
