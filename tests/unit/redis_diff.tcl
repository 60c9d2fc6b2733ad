# The server against redis-server, command for command: a short run of
# tests/helpers/redis_diff.py, which starts both servers on free ports,
# sends each a seeded random sequence of string, keyspace, expiry, SCAN,
# MULTI/EXEC/WATCH, Pub/Sub, CLIENT, CONFIG, COMMAND, MEMORY, SLOWLOG and
# DUMP/RESTORE-error commands over raw RESP2 and then RESP3, and compares
# every reply (error texts to the letter) and every keyspace event (see the
# script's top for what is compared how, and what is left out and why).
#
# Fixed seeds and no timing: the script never sleeps, sets no TTL that could
# pass while it runs, and compares TTLs within the round trips it measured,
# so a seed that passes once passes every time. One test per seed and
# protocol; a failure shows the commands before the first differences.
# Longer runs by hand: tests/helpers/redis_diff.py --seed N --count 20000, or
# --seed-range 1:200 --count 5000 (--show-info lists every error text that differed).
# Then the ACL sequence of a few seeds (users, rules, AUTH as them, DRYRUN,
# CAT, LOG; the script's "the ACL mode"), by hand with --seeds "" --acl-seeds.
#
# Skipped, saying so, when redis-server (Debian's redis-server 7) is not
# installed.

set ::rdiff_seeds {1 2 3}
set ::rdiff_count 1500
set ::rdiff_acl_seeds {1 2}
set ::rdiff_acl_count 300
set ::rdiff_out {}
set ::rdiff_rc 0

tags {redis_diff mooncake} {
    if {[__tags_skip_reason__ {redis_diff mooncake}] eq ""} {
        set ::rdiff_rc [catch {
            exec env MC_SERVER_BINARY=$::harness(binary) /usr/bin/python3 \
                [file join $::harness(testsdir) helpers redis_diff.py] \
                --seeds [join $::rdiff_seeds ,] --count $::rdiff_count \
                --acl-seeds [join $::rdiff_acl_seeds ,] --acl-count $::rdiff_acl_count --max-diffs 3 2>@1
        } ::rdiff_out]
    }

    set skip ""
    regexp -line {^\[skip\] (.*)$} $::rdiff_out -> skip
    if {$skip ne ""} {
        test {redis_diff: mooncake-server against redis-server} { skip $skip }
    } else {
        set lines [split $::rdiff_out "\n"]
        # One test per seed and protocol, for the string/keyspace mode and the
        # ACL mode alike ("[ok] seed N respR:" / "[ok] acl seed N respR:").
        foreach {mode seeds count} [list "" $::rdiff_seeds $::rdiff_count "acl " $::rdiff_acl_seeds $::rdiff_acl_count] {
            foreach seed $seeds {
                foreach resp {2 3} {
                    set ::rdiff_line [lsearch -inline -regexp $lines "^\\\[(ok|err)\\\] ${mode}seed $seed resp$resp:"]
                    # The differences follow their seed's line, up to the next one.
                    set ::rdiff_detail {}
                    set i [lsearch -exact $lines $::rdiff_line]
                    if {$i >= 0} {
                        foreach l [lrange $lines [expr {$i + 1}] end] {
                            if {[string match {\[*} $l]} break
                            append ::rdiff_detail $l "\n"
                        }
                    }
                    set what [expr {$mode eq "" ? "seed" : "ACL seed"}]
                    test "redis_diff: $what $seed over RESP$resp, $count commands, same replies as redis-server" {
                        if {$::rdiff_line eq ""} {
                            fail "no line for this seed; output:\n[string range $::rdiff_out end-3000 end]"
                        }
                        assert_match {\[ok\] *} $::rdiff_line "$::rdiff_line\n$::rdiff_detail"
                    }
                }
            }
        }

        test {redis_diff.py exits 0 exactly when no seed differed} {
            set failed [regexp -line {^\[err\]} $::rdiff_out]
            assert_equal $failed $::rdiff_rc "output:\n[string range $::rdiff_out end-3000 end]"
        }
    }

    # The same redis-py calls against both servers, compared as redis-py
    # parses them (tests/helpers/redis_py_diff.py says what and why).
    set ::rpy_out {}
    set ::rpy_rc 0
    if {[__tags_skip_reason__ {redis_diff mooncake}] eq ""} {
        set ::rpy_rc [catch {
            exec env MC_SERVER_BINARY=$::harness(binary) /usr/bin/python3 \
                [file join $::harness(testsdir) helpers redis_py_diff.py] 2>@1
        } ::rpy_out]
    }
    set skip ""
    regexp -line {^\[skip\] (.*)$} $::rpy_out -> skip
    test {redis_py_diff: redis-py's parsed results alike from mooncake-server and redis-server} {
        if {$skip ne ""} { skip $skip }
        assert_match {\[ok\] redis-py*} $::rpy_out $::rpy_out
        assert_equal 0 $::rpy_rc $::rpy_out
    }
}
