package main

import (
	"context"
	"fmt"
)

const helpText = `gaas: a peer-to-peer GPU marketplace.

Usage: gaas COMMAND [flags]

Run a peer:
  node         run a node: a buyer, and a provider when --provider is set
  coordinator  run the coordinator: the ledger peer and DHT bootstrap peer
  testnet      run a whole market on this machine (coordinator, providers
               with simulated GPUs, a buyer) until interrupted
  demo         start a testnet, run the bundled example job, show the bill

Use a node (it is found with --node or GAAS_NODE, authorized with --token
or GAAS_TOKEN, or the token in GAAS_DATA):
  job submit --tier TIER --dataset FILE.csv --script FILE.py
             [--package NAME]... [--max-hours H] [--out DIR] [--yes]
               check the inputs, show the price, run the job, follow it,
               and download the model
  job list [--json]            jobs, newest first
  job show ID [--json]         one job: state, explanation, model, charge
  job logs ID [--follow] [--json]
                               the job's output
  job cancel ID                stop a job; a running job is charged for
                               the seconds it ran
  job model ID [--out DIR]     save a completed job's model again
  ledger balance [--json]      this node's balance at the coordinator
  ledger history [--json]      this node's ledger entries
  ledger payout AMOUNT         pay provider earnings out (rupees)

Operate the coordinator (--coordinator ADDR --operator-key FILE, or
GAAS_COORDINATOR and GAAS_OPERATOR_KEY):
  ledger credit ACCOUNT AMOUNT [--key K]
                               top an account up (rupees); the same key
                               never credits twice
  ledger verify [--json]       re-walk the journal and check every
                               invariant; exits 1 on any problem

Inspect this machine:
  gpu          the NVIDIA GPUs found and the tier each can serve
  doctor       whether this machine can provide: sandbox, limits, GPU
  sandbox run SCRIPT.py [--dataset FILE.csv] [--package NAME]... [--out DIR] [--gpu]
               run a script through exactly the sandbox a job uses, print
               its output, how it ended and the limits, export its model

Flags that set up a peer or say which node to talk to can also come from
environment variables; 'gaas COMMAND --help' names them. GAAS_LOG=debug|info|warn|error sets how much the
peers log (default: warnings and errors only).
`

var commandHelp = map[string]string{
	"job": `Usage:
  gaas job submit --tier TIER --dataset FILE.csv --script FILE.py [--package NAME]... [--max-hours H] [--out DIR] [--yes]
  gaas job list [--json]
  gaas job show ID [--json]
  gaas job logs ID [--follow] [--json]
  gaas job cancel ID
  gaas job model ID [--out DIR]
Each takes --node URL (GAAS_NODE) and --token TOKEN (GAAS_TOKEN).
`,
	"ledger": `Usage:
  gaas ledger balance [--json] [--node URL] [--token TOKEN]
  gaas ledger history [--json] [--node URL] [--token TOKEN]
  gaas ledger payout AMOUNT [--key K] [--node URL] [--token TOKEN]
  gaas ledger credit ACCOUNT AMOUNT [--key K] [--reason R] --coordinator ADDR --operator-key FILE
  gaas ledger verify [--json] --coordinator ADDR --operator-key FILE
`,
}

func (c *cli) help(args []string) {
	if len(args) > 0 {
		if h, ok := commandHelp[args[0]]; ok {
			fmt.Fprint(c.stdout, h)
			return
		}
		if args[0] != "help" {
			c.run(context.Background(), []string{args[0], "--help"})
			return
		}
	}
	fmt.Fprint(c.stdout, helpText)
}
