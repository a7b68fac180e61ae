// Command cosmicac-agent is what runs inside a job's VM: the instance
// agent of a GPU Container Job and the inference agent of a managed
// inference replica, and nothing of the platform's components. The agent
// disk (hack/agent-disk.sh) carries a static build of it into every VM.
package main

import (
	"os"

	"github.com/cosmicac/cosmicac/internal/agentcmd"
)

func main() {
	os.Exit(agentcmd.Main(os.Args[1:]))
}
