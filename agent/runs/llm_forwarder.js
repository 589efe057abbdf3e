// Runs inside a CLI agent's sandbox, which has no network: listens on the sandbox's own
// loopback and relays each connection, byte for byte, to the model gateway's Unix socket
// (bound into the sandbox read-only), then starts the CLI, so that no call of the CLI
// can come before the port is open. Usage: node forwarder.js SOCKET PORT CLI [ARGS...]
"use strict";
const net = require("net");
const { spawn } = require("child_process");

const [socketPath, port, ...argv] = process.argv.slice(2);

const server = net.createServer((client) => {
  const gateway = net.connect(socketPath);
  const close = () => {
    client.destroy();
    gateway.destroy();
  };
  client.on("error", close);
  gateway.on("error", close);
  client.on("close", close);
  gateway.on("close", close);
  client.pipe(gateway);
  gateway.pipe(client);
});

server.on("error", (error) => {
  console.error(`harness: the model forwarder cannot listen: ${error.message}`);
  process.exit(1);
});

server.listen(Number(port), "127.0.0.1", () => {
  // Ctrl-C in the pane is the CLI's (it is in our process group): not ours to die of.
  process.on("SIGINT", () => {});
  const cli = spawn(argv[0], argv.slice(1), { stdio: "inherit" });
  for (const signal of ["SIGTERM", "SIGHUP"]) {
    process.on(signal, () => cli.kill(signal));
  }
  cli.on("error", (error) => {
    console.error(`harness: cannot start ${argv[0]}: ${error.message}`);
    process.exit(127);
  });
  cli.on("exit", (code, signal) => process.exit(code === null ? 128 : code));
});
