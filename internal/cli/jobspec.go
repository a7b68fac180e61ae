package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/jobflags"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// specFlags are the `jobs create` (and `jobs command`) flags: the spec's
// (jobflags.Flags) and -f FILE.
type specFlags struct {
	file string
	jobflags.Flags
}

func (f *specFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	f.Flags.Add(fs)
	fs.StringVarP(&f.file, "file", "f", "", "a full job spec, YAML or JSON ('-' reads stdin); flags override its fields")
	_ = cmd.RegisterFlagCompletionFunc("type", cobra.FixedCompletions([]string{string(cosmic.TypeGPUContainer), string(cosmic.TypeManagedInference)}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("runtime", cobra.FixedCompletions(runtimeNames(), cobra.ShellCompDirectiveNoFileComp))
}

// spec builds the spec from -f FILE (if any), then the flags given, then
// the command after "--". It neither defaults nor validates. Its errors are
// usage errors (exit 2).
func (f *specFlags) spec(cmd *cobra.Command, args []string, stdin io.Reader) (cosmic.Spec, error) {
	var s cosmic.Spec
	dash := cmd.ArgsLenAtDash()
	if dash < 0 && len(args) > 0 || dash > 0 {
		return s, UsageErrorf("unexpected argument %q: put the job's command after --, as in: cosmicac jobs create ... -- python train.py", args[0])
	}
	if f.file != "" {
		var err error
		if s, err = readSpecFile(f.file, stdin); err != nil {
			return s, WithExit(ExitUsage, err)
		}
	}
	if err := f.Flags.Apply(cmd.Flags(), &s, f.file != ""); err != nil {
		return s, WithExit(ExitUsage, err)
	}
	if dash >= 0 {
		s.Command = append([]string(nil), args[dash:]...)
	}
	return s, nil
}

// readSpecFile reads a spec from a YAML or JSON file ("-" is stdin),
// strictly: unknown fields are errors.
func readSpecFile(path string, stdin io.Reader) (cosmic.Spec, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
		path = "stdin"
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return cosmic.Spec{}, fmt.Errorf("read spec: %w", err)
	}
	js := data
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		if js, err = yaml.YAMLToJSON(data); err != nil {
			return cosmic.Spec{}, fmt.Errorf("read spec %s: %w", path, err)
		}
	}
	if spec, ok, err := jobDocumentSpec(js); err != nil {
		return cosmic.Spec{}, fmt.Errorf("read spec %s: %w", path, err)
	} else if ok {
		js = spec
	}
	s, err := cosmic.ParseSpec(js)
	if err != nil {
		return s, fmt.Errorf("read spec %s: %w", path, err)
	}
	return s, nil
}

// jobDocumentSpec takes the spec out of a whole job as `jobs get -o
// json|yaml` prints it (a document with a "spec" object), so that output
// can be created again, as kubectl creates from its own output: the job's
// ID, status and times are the platform's and are left out. A document
// without "spec" is a spec itself (ok false). A job document is read as
// strictly as a spec: a field a job does not have is refused.
func jobDocumentSpec(js []byte) (spec json.RawMessage, ok bool, err error) {
	var top map[string]json.RawMessage
	if json.Unmarshal(js, &top) != nil {
		return nil, false, nil // not an object: ParseSpec says why
	}
	raw, ok := top["spec"]
	if !ok {
		return nil, false, nil
	}
	var job struct {
		apiv1.Job
		Spec json.RawMessage `json:"spec"`
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&job); err != nil {
		return nil, false, fmt.Errorf("a job document (it has \"spec\"): %w", err)
	}
	return raw, true, nil
}

// validateSpec defaults a copy of s and validates it, reporting every
// problem on one line each (exit 2).
func validateSpec(s cosmic.Spec) (cosmic.Spec, error) {
	s.Default()
	if err := s.Validate(); err != nil {
		return s, WithExit(ExitUsage, fieldProblems("invalid job spec", cosmic.FieldErrors(err), err))
	}
	return s, nil
}

// fieldProblems formats field errors as a headline and one indented line
// each; with none it falls back to err.
func fieldProblems(headline string, fes []*cosmic.FieldError, err error) error {
	if len(fes) == 0 {
		return fmt.Errorf("%s: %w", headline, err)
	}
	var b strings.Builder
	b.WriteString(headline + ":")
	for _, fe := range fes {
		b.WriteString("\n  " + fe.Error())
	}
	return errors.New(b.String())
}

// runtimeNames are the inference runtimes, for completion.
func runtimeNames() []string {
	out := make([]string, len(cosmic.Runtimes))
	for i, r := range cosmic.Runtimes {
		out[i] = string(r)
	}
	return out
}
