# Every code block in README.md and docs/*.md runs as written: shell lines,
# the C example (compiled against libmooncake and run), the redis-cli session
# of docs/PROTOCOL.md (one connection, replies compared line for line), and
# the syntax references (every command they name exists). The work is done by
# tests/helpers/docs_check.py, which starts its own servers on free ports; a
# block that cannot run here says why, and shows up as a skip.

set ::docs_out {}
set ::docs_rc 0

tags {docs mooncake} {
    if {[__tags_skip_reason__ {docs mooncake}] eq ""} {
        set ::docs_rc [catch {
            exec /usr/bin/python3 [file join $::harness(testsdir) helpers docs_check.py] 2>@1
        } ::docs_out]
    }

    test {Every README/docs code block was found and classified} {
        set n [llength [regexp -all -inline -line {^\[(?:ok|err|skip)\] } $::docs_out]]
        # README (make run, make test, redis-cli, cluster, C, mooncake-cli) and
        # the PROTOCOL/SPEC blocks: fewer means the extractor lost some.
        assert_morethan_equal $n 15
    }

    foreach line [split $::docs_out "\n"] {
        if {![regexp {^\[(ok|err|skip)\] ([^:]+:[0-9]+ ?[^:]*)(?:: (.*))?$} $line -> status what why]} continue
        set what [string trim $what]
        if {$status eq "skip"} {
            test "docs: $what" { skip $why }
            continue
        }
        set ::docs_status $status
        set ::docs_why $why
        test "docs: $what runs as written" {
            assert_equal ok $::docs_status $::docs_why
        }
    }

    test {docs_check.py exits 0 exactly when no block failed} {
        set failed [regexp -line {^\[err\]} $::docs_out]
        assert_equal $failed $::docs_rc "output:\n$::docs_out"
    }
}
