# CONFIG GET/SET/RESETSTAT/REWRITE, the config file and command-line
# overrides.

# Start the server binary on a config file and wait for it to give up.
# Returns {exited output}; a server still running after timeout_ms is
# killed and reported as not exited.
start_server {tags {config}} {
    test {CONFIG GET with a glob pattern} {
        set cfg [r config get max*]
        assert {[dict exists $cfg maxclients]}
        dict for {k v} $cfg { assert_match max* $k }
        set all [r config get *]
        foreach p {maxclients timeout tcp-keepalive proto-max-bulk-len client-query-buffer-limit port} {
            assert {[dict exists $all $p]}
        }
    }

    test {CONFIG GET of one parameter} {
        r config get port
    } [list port [srv 0 port]]

    test {repl-backlog-size is at least 16kb, as Redis's; masterauth is binary-safe} {
        assert_error {*repl-backlog-size*} {r config set repl-backlog-size 1kb}
        assert_equal {repl-backlog-size 1048576} [r config get repl-backlog-size]
        assert_equal OK [r config set masterauth "a b\x00c"]
        set got [lindex [r config get masterauth] 1]
        r config set masterauth ""
        list [string length $got] [r config get masterauth]
    } {5 {masterauth {}}}

    test {CONFIG GET of an unknown parameter is empty} {
        r config get no-such-parameter
    } {}

    foreach {param value expected} {
        maxclients                 500      500
        timeout                    37       37
        tcp-keepalive              123      123
        proto-max-bulk-len         2mb      2097152
        proto-max-bulk-len         3000000  3000000
        client-query-buffer-limit  2mb      2097152
        client-query-buffer-limit  1gb      1073741824
        repl-backlog-size          64kb     65536
        repl-backlog-ttl           0        0
        masteruser                 repl     repl
    } {
        test "CONFIG SET $param $value then CONFIG GET" {
            set old [lindex [r config get $param] 1]
            assert_equal OK [r config set $param $value]
            set got [r config get $param]
            r config set $param $old
            assert_equal $old [lindex [r config get $param] 1]
            set got
        } [list $param $expected]
    }

    test {CONFIG SET parameter names are case-insensitive} {
        set old [lindex [r config get maxclients] 1]
        r config set MAXCLIENTS 400
        set got [lindex [r config get maxclients] 1]
        r config set maxclients $old
        set got
    } {400}

    test {CONFIG SET with a bad value} {
        set old [r config get maxclients]
        assert_error {ERR CONFIG SET failed*} {r config set maxclients abc}
        assert_error {ERR CONFIG SET failed*} {r config set timeout -1}
        assert_error {ERR CONFIG SET failed*} {r config set tcp-keepalive xyz}
        assert_error {ERR CONFIG SET failed*} {r config set proto-max-bulk-len abc}
        assert_error {ERR CONFIG SET failed*} {r config set client-query-buffer-limit -5}
        # A refused value changes nothing.
        assert_equal $old [r config get maxclients]
    }

    test {Every parameter refuses a value of the wrong kind, naming itself, and changes nothing} {
        # Walks CONFIG GET *, so a parameter added to config.c's table is
        # covered the day it is added. Only free-form strings take "abc"
        # (a password, a user name).
        set takes_any {requirepass masterauth masteruser}
        set before [r config get *]
        assert_morethan [llength $before] 100
        foreach {name value} $before {
            if {$name in $takes_any} continue
            foreach bad {abc 99999999999999999999999} {
                if {[catch {r config set $name $bad} err]} {
                    assert_match "ERR CONFIG SET failed (possibly related to argument '$name') - ?*" $err
                } else {
                    fail "CONFIG SET $name $bad was taken"
                }
            }
        }
        assert_equal $before [r config get *]
    }

    test {A refused CONFIG SET with requirepass leaves the default user's passwords as they were} {
        # requirepass stays "" when ACL SETUSER gives default its passwords:
        # setting that old value back on a refusal made default nopass.
        r acl setuser default resetpass >secret1 >secret2
        r auth secret1
        assert_equal {} [lindex [r config get requirepass] 1]
        # Refused while setting (a bad value) and while applying (a busy port).
        assert_error {ERR CONFIG SET failed*maxmemory*} {r config set requirepass x maxmemory junk}
        assert_error {ERR CONFIG SET failed*http-port*} {r config set requirepass x http-port [srv port]}
        set rd [redis_client]
        assert_error {NOAUTH*} {$rd ping}
        assert_error {WRONGPASS*} {$rd auth x}
        assert_equal OK [$rd auth secret2]
        $rd close
        set default [lsearch -inline [r acl list] {user default *}]
        r acl setuser default resetpass nopass
        list [string match {* nopass *} $default] [llength [regexp -all -inline {#[0-9a-f]{64}} $default]]
    } {0 2}

    test {A refused CONFIG SET leaves no effect an undo cannot take back: the ACL log, the AOF} {
        # Applied in the order given, the ACL log was trimmed to 0 before
        # maxmemory was refused, and the AOF turned on (a forked rewrite,
        # an appendonlydir) before the busy http-port was.
        r acl log reset
        catch {r auth nosuchuser nosuchpass}
        assert_equal 1 [llength [r acl log]]
        assert_error {*maxmemory*} {r config set acllog-max-len 0 maxmemory 1tb}
        assert_error {*http-port*} {r config set appendonly yes http-port [srv port]}
        set got [list [llength [r acl log]] [lindex [r config get acllog-max-len] 1] \
                     [lindex [r config get appendonly] 1] [file exists [file join [srv dir] appendonlydir]]]
        # The AOF's hook may refuse too (a file where its directory goes):
        # it runs before the trim of the ACL log, not in the order given.
        set blocker [file join [srv dir] appendonlydir]
        close [open $blocker w]
        catch {r config set acllog-max-len 0 appendonly yes} e
        file delete $blocker
        lappend got [string match {*appendonly*AOF directory*} $e] [llength [r acl log]]
    } {1 128 no 0 1 1}

    test {Numbers with decimals read back as given: a percentile of 99.99999 is not 100} {
        # %g kept six digits: GET, INFO and REWRITE said 100, and the undo of
        # a refused CONFIG SET set 100, the maximum, in its place.
        r config set latency-tracking-info-percentiles "50 99.99999" evict-ratio 0.123456789012345678
        assert_error {*maxmemory*} {r config set latency-tracking-info-percentiles "1 2" evict-ratio 0.5 maxmemory junk}
        set p [lindex [r config get latency-tracking-info-percentiles] 1]
        set e [lindex [r config get evict-ratio] 1]
        r ping
        set info [r info latencystats]
        r config set latency-tracking-info-percentiles "50 99 99.9" evict-ratio 0.05
        list $p [expr {$e == 0.123456789012345678}] [string match {*ping:p50=*,p99.99999=*} $info]
    } {{50 99.99999} 1 1}

    test {CONFIG SET refuses a value with a zero byte, except a password's} {
        # Read as C strings, these were set to what comes before the zero.
        foreach {name value} [list maxclients "5\x00junk" timeout "7\x00" protected-mode "no\x00x" \
                                  maxmemory "1\x00gb" evict-ratio "0.5\x00" loglevel "debug\x00" \
                                  http-bind "127.0.0.1\x00junk" masteruser "u\x00v" \
                                  client-output-buffer-limit "normal 1 2 3\x00"] {
            set old [r config get $name]
            assert_error {*zero byte*} {r config set $name $value}
            assert_equal $old [r config get $name]
        }
        assert_equal OK [r config set requirepass "p\x00q"]
        r auth "p\x00q"
        r config set requirepass ""
    } {OK}

    test {CONFIG SET of an unknown parameter} {
        assert_error {ERR Unknown option*} {r config set no-such-parameter 1}
    }

    test {CONFIG arity and subcommand errors} {
        assert_error {ERR wrong number of arguments*} {r config set maxclients}
        assert_error {ERR wrong number of arguments*} {r config get}
        assert_error {ERR wrong number of arguments*} {r config}
        assert_error {ERR unknown subcommand*} {r config foo}
    }

    test {CONFIG RESETSTAT resets the INFO counters} {
        r set hit v
        for {set i 0} {$i < 50} {incr i} { r ping }
        r get hit
        r get nokey
        assert_morethan [get_info_field r stats total_commands_processed] 50
        assert_equal OK [r config resetstat]
        assert_lessthan [get_info_field r stats total_commands_processed] 5
        assert_equal 0 [get_info_field r stats keyspace_hits]
        assert_equal 0 [get_info_field r stats keyspace_misses]
        assert_equal 0 [get_info_field r stats expired_keys]
        # Counting starts again.
        r get hit
        get_info_field r stats keyspace_hits
    } {1}
}

start_server {tags {config} overrides {maxclients 321 timeout 0}} {
    test {Config file directives take effect} {
        lindex [r config get maxclients] 1
    } {321}
}

start_server {tags {config} args {--maxclients 222}} {
    test {Command-line --directive overrides} {
        lindex [r config get maxclients] 1
    } {222}
}

# A directive of several words given as one argument, the command line's
# form (redis-server takes it so): split as CONFIG SET splits it.
start_server {tags {config} args {--client-output-buffer-limit {normal 1mb 2mb 3} --latency-tracking-info-percentiles {50 99.5}}} {
    test {Command-line --directive with several words in one argument} {
        assert_equal {normal 1048576 2097152 3} [lrange [lindex [r config get client-output-buffer-limit] 1] 0 3]
        lindex [r config get latency-tracking-info-percentiles] 1
    } {50 99.5}
}

start_server {tags {config} overrides {tcp-keepalive 60}} {
    test {CONFIG REWRITE writes the running values to the config file} {
        r config set maxclients 777
        r config set tcp-keepalive 77
        assert_equal OK [r config rewrite]
        set f [open [srv 0 config_file] r]
        set text [read $f]
        close $f
        assert_match "*\nmaxclients 777*" "\n$text"
        assert_match "*\ntcp-keepalive 77*" "\n$text"
        assert_no_match "*\ntcp-keepalive 60*" "\n$text"
    }

    test {A server restarted on the rewritten file keeps the values} {
        set port [srv 0 port]
        restart_server
        assert_equal $port [srv 0 port]
        assert_equal {maxclients 777} [r config get maxclients]
        assert_equal {tcp-keepalive 77} [r config get tcp-keepalive]
        r ping
    } {PONG}

    test {CONFIG REWRITE writes the output buffer limits one class a line, sizes in units} {
        # As mooncake.conf gives them and Redis writes them; it wrote CONFIG
        # GET's single line of bytes ("normal 0 0 0 slave 268435456 ...").
        r config set client-output-buffer-limit {pubsub 64mb 16mb 30}
        assert_equal OK [r config rewrite]
        set f [open [srv 0 config_file] r]
        set lines [lsearch -all -inline -glob [split [read $f] "\n"] client-output-buffer-limit*]
        close $f
        assert_equal [list {client-output-buffer-limit normal 0 0 0} \
                          {client-output-buffer-limit replica 256mb 64mb 60} \
                          {client-output-buffer-limit pubsub 64mb 16mb 30}] $lines
        restart_server
        lindex [r config get client-output-buffer-limit] 1
    } {normal 0 0 0 slave 268435456 67108864 60 pubsub 67108864 16777216 30}

    test {CONFIG REWRITE keeps the config file's permissions} {
        # It may hold requirepass: a file made 0600 must not come back
        # readable by everyone.
        file attributes [srv 0 config_file] -permissions 0600
        assert_equal OK [r config rewrite]
        file attributes [srv 0 config_file] -permissions
    } {00600}

    test {CONFIG REWRITE twice gives the same directives} {
        # Blank lines may differ (Redis adds one per rewrite), directives not;
        # Redis's own ACL "user" lines are not ours to judge.
        set f [open [srv 0 config_file] r]
        set before [lsearch -all -inline -not -regexp [split [read $f] "\n"] {^\s*$|^user }]
        close $f
        r config rewrite
        set f [open [srv 0 config_file] r]
        set after [lsearch -all -inline -not -regexp [split [read $f] "\n"] {^\s*$|^user }]
        close $f
        assert_equal $before $after
    }
}

start_server {tags {config}} {
    test {A config file with an unknown directive is refused at startup} {
        lassign [run_conf_expecting_exit "port [find_available_port]\nbind 127.0.0.1\nno-such-directive 1"] exited out
        assert_equal 1 $exited "server exited?"
        assert_match *no-such-directive* $out
    }

    test {A config file with a bad value is refused at startup} {
        lassign [run_conf_expecting_exit "port [find_available_port]\nbind 127.0.0.1\nmaxclients notanumber"] exited out
        assert_equal 1 $exited "server exited?"
        assert_match *maxclients* $out
    }

    test {A config file with a zero byte is refused, not read up to the byte} {
        # Read as a C string, the file ended at the zero: the directive
        # after it was never seen and the server started without it.
        lassign [run_conf_expecting_exit "port [find_available_port]\nbind 127.0.0.1\n\0\nno-such-directive 1"] exited out
        assert_equal 1 $exited "server exited?"
        assert_match {*line 3*zero byte*} $out
        lassign [run_conf_expecting_exit "port [find_available_port]\nbind 127.0.0.1\nmaxmemory 5\0gb"] exited out
        assert_equal 1 $exited "server exited?"
        assert_match {*line 3*zero byte*} $out
    }

    test {bind refuses an empty word or a quote among its addresses} {
        # Taken before, and written back by CONFIG REWRITE as other
        # addresses than were given (`127.0.0.1 ""` became one address, a
        # quote made a file that did not load): found by fuzz_config.
        foreach bad [list {127.0.0.1 ""} {127.0.0.1 "a'b"} {"\x01"} {" "} {"  \t "}] {
            lassign [run_conf_expecting_exit "port [find_available_port]\nbind $bad"] exited out
            assert_equal 1 $exited "server exited with bind $bad?"
            assert_match {*line 2*Invalid bind address*} $out
        }
    }

    test {A config file that cannot be read is refused, not taken as empty} {
        set dir [tmpfile conf-dir]
        file mkdir $dir
        lassign [run_server_expecting_exit $dir --port [find_available_port] --bind 127.0.0.1] exited out
        file delete -force $dir
        assert_equal 1 $exited "server exited?"
        assert_match {*can't read config file*Is a directory*} $out
    }
}

# databases: there is one (SELECT 0), and CONFIG GET says so, for the tools
# that size their database pickers from it (Redis answers 16).
start_server {tags {config mooncake}} {
    test {CONFIG GET databases is 1, immutable, and a config file may only say 1} {
        assert_equal {databases 1} [r config get databases]
        assert_error {*can't set immutable config*} {r config set databases 16}
        assert_error {ERR DB index is out of range} {r select 1}
        lassign [run_conf_expecting_exit "port [find_available_port]\nbind 127.0.0.1\ndatabases 16"] exited out
        assert_equal 1 $exited "server exited?"
        assert_match *databases* $out
    }
}

# Protected configs, as Redis 7 (these pass against redis-server 7.0 too):
# dir is refused to CONFIG SET unless enable-protected-configs allows it.
start_server {tags {config}} {
    test {CONFIG SET dir is refused by default, with Redis's error} {
        set d [lindex [r config get dir] 1]
        assert_error {ERR CONFIG SET failed (possibly related to argument 'dir') - can't set protected config} \
            {r config set dir /tmp}
        # All or nothing: the other parameter of the same SET is not applied.
        set before [lindex [r config get maxclients] 1]
        assert_error {*can't set protected config*} {r config set maxclients 123 dir /tmp}
        assert_equal $before [lindex [r config get maxclients] 1]
        assert_equal $d [lindex [r config get dir] 1]
        assert_equal no [lindex [r config get enable-protected-configs] 1]
        assert_error {*can't set immutable config*} {r config set enable-protected-configs yes}
    }
}

start_server {tags {config} overrides {enable-protected-configs yes}} {
    test {enable-protected-configs yes: CONFIG SET dir is allowed} {
        set d [lindex [r config get dir] 1]
        assert_equal OK [r config set dir /tmp]
        assert_equal /tmp [lindex [r config get dir] 1]
        assert_equal OK [r config set dir $d]
    }
}

start_server {tags {config} overrides {enable-protected-configs local}} {
    test {enable-protected-configs local: allowed from a loopback connection} {
        set d [lindex [r config get dir] 1]
        assert_equal local [lindex [r config get enable-protected-configs] 1]
        assert_equal OK [r config set dir /tmp]
        assert_equal OK [r config set dir $d]
    }
}

# One owner of "how many descriptors the server may hold" (server.c
# serverFdsNeeded): every client, the relay's connections to segment hosts,
# and a reserve. CONFIG SET of any directive in the count raises the fd limit
# to cover it or is refused, changing nothing.
start_server {tags {config} overrides {maxclients 100 http-maxclients 10 remote-get-max-inflight 8}} {
    proc fd_soft_limit {} { string trim [exec prlimit --pid [srv 0 pid] --nofile --noheadings --output SOFT] }

    test {CONFIG SET of maxclients, http-maxclients or remote-get-max-inflight: the fd limit covers all, or it is refused} {
        if {[find_program prlimit] eq ""} { skip "prlimit (util-linux) is not installed" }
        # 100 + 10 + 8 + 16 idle relay connections + 32 reserved = 166 needed
        exec prlimit --pid [srv 0 pid] --nofile=300:300
        assert_error {*not able to handle*} {r config set remote-get-max-inflight 200}
        assert_equal 8 [lindex [r config get remote-get-max-inflight] 1]
        assert_equal OK [r config set remote-get-max-inflight 100]
        # 100 + 10 + 100 + 16 + 32 = 258
        assert_morethan_equal [fd_soft_limit] 258
        assert_error {*not able to handle*} {r config set maxclients 200}
        assert_equal 100 [lindex [r config get maxclients] 1]
        assert_error {*not able to handle*} {r config set http-maxclients 60}
        assert_equal 10 [lindex [r config get http-maxclients] 1]
        assert_equal OK [r config set maxclients 140]
        assert_morethan_equal [fd_soft_limit] 298
        assert_equal PONG [r ping]
    }
}

# Found by the differential fuzzer against redis-server 7.0 (its answers).
start_server {tags {config}} {
    test {CONFIG GET of a plain name answers with the name as asked (its case), a pattern with the canonical name} {
        assert_equal {MAXMEMORY 0} [r config get MAXMEMORY]
        assert_equal {maxMemory 0} [r config get maxMemory]
        assert_equal {maxmemory 0} [r config get maxmemor?]
        # the same parameter asked twice: once, as first asked
        assert_equal {Timeout 0} [r config get Timeout timeout]
    }

    test {CONFIG SET of a negative size: "must be a memory value", and nothing changes} {
        set before [r config get maxmemory]
        foreach v {-1 -5mb} {
            assert_error {*argument 'maxmemory') - argument must be a memory value} {r config set maxmemory $v}
        }
        assert_error {*argument must be between 1048576 and*} {r config set proto-max-bulk-len 100}
        assert_equal $before [r config get maxmemory]
    }

    test {CONFIG SET with a name left without its value: a syntax error, as Redis, and nothing set} {
        set before [r config get timeout]
        assert_error {ERR syntax error} {r config set timeout 5 hz}
        assert_error {ERR syntax error} {r config set timeout 5 hz 10 x}
        assert_error {ERR wrong number of arguments for 'config|set' command} {r config set timeout}
        assert_equal $before [r config get timeout]
    }

    test {CONFIG SET appendfsync: the choices listed in Redis's order} {
        assert_error {*argument(s) must be one of the following: everysec, always, no} {r config set appendfsync bogus}
    }

    test {CONFIG SET latency-tracking-info-percentiles: Redis's messages, not a number then out of range} {
        set before [r config get latency-tracking-info-percentiles]
        assert_error {*- Invalid latency-tracking-info-percentiles parameters} {r config set latency-tracking-info-percentiles abc}
        assert_error {*- Invalid latency-tracking-info-percentiles parameters} {r config set latency-tracking-info-percentiles "50 x"}
        assert_error {*- latency-tracking-info-percentiles parameters should sit between \[0.0,100.0\]} {r config set latency-tracking-info-percentiles -1}
        assert_error {*should sit between*} {r config set latency-tracking-info-percentiles "50 100.5"}
        assert_equal $before [r config get latency-tracking-info-percentiles]
    }

    test {CONFIG SET latency-tracking-info-percentiles splits at each single space, as Redis} {
        set before [r config get latency-tracking-info-percentiles]
        # an empty word (leading, trailing or doubled space) or a tab is not a number
        foreach v [list " 1" "1 " "50  99" "50\t99" "\t50"] {
            assert_error {*- Invalid latency-tracking-info-percentiles parameters} \
                [list r config set latency-tracking-info-percentiles $v]
        }
        assert_equal $before [r config get latency-tracking-info-percentiles]
        assert_equal OK [r config set latency-tracking-info-percentiles "1e1 5"]
        assert_equal {latency-tracking-info-percentiles {10 5}} [r config get latency-tracking-info-percentiles]
        assert_equal OK [r config set latency-tracking-info-percentiles ""]
        assert_equal {latency-tracking-info-percentiles {}} [r config get latency-tracking-info-percentiles]
        r config set latency-tracking-info-percentiles "50 99 99.9"
    }
}

tags {config} {
    test {A "-" last on the command line reads standard input after the file, the options winning (the usage's form)} {
        # `mooncake-server FILE [options] -`, as --help writes it and as
        # redis-server takes it: the trailing "-" was read as one more
        # argument of the option before it ("hz 33 -": wrong number of
        # arguments) and the server did not start.
        set dir [tmpfile stdin-conf]
        file mkdir $dir
        set conf [file join $dir base.conf]
        set f [open $conf w]
        puts $f "maxclients 111\nslowlog-max-len 11"
        close $f
        set port [find_available_port]
        set out [file join $dir out]
        set pid [exec $::harness(binary) $conf --port $port --bind 127.0.0.1 --dir $dir --segment-size 16mb \
                     --segment-prefault no --maxclients 333 - << "maxclients 222\nslowlog-max-len 22\nhz 22\n" >& $out &]
        set got {}
        wait_for_condition 100 50 {
            ![catch {exec redis-cli -p $port ping} pong] && $pong eq "PONG"
        } else {
            set f [open $out]
            set log [read $f]
            close $f
            catch {exec kill $pid}
            file delete -force $dir
            fail "the server did not start: $log"
        }
        foreach name {maxclients slowlog-max-len hz} {
            lappend got $name [lindex [split [exec redis-cli -p $port config get $name] "\n"] 1]
        }
        catch {exec redis-cli -p $port shutdown nosave}
        wait_for_condition 100 50 {![process_is_alive $pid]} else { catch {exec kill -9 $pid} }
        catch {exec true}
        file delete -force $dir
        # file, then standard input, then the options
        assert_equal {maxclients 333 slowlog-max-len 22 hz 22} $got
    }
}
