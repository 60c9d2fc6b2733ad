# Unmodified Redis clients against the server: redis-cli (interactive
# through a pipe, --scan, -r, --pipe, --raw), redis-benchmark and redis-py.
# A missing tool makes its tests skip, visibly.

set ::cli [find_program redis-cli]
set ::bench [find_program redis-benchmark]
set ::syspython [find_program /usr/bin/python3]
# Never wait forever on a tool talking to a server that misbehaves.
set ::tlimit [expr {[find_program timeout] ne "" ? [list timeout 120] : {}}]

proc need {prog what} {
    if {$prog eq ""} { skip "$what is not installed" }
}

# Run a tool; returns its stdout and stderr together. A non-zero exit fails.
proc run_tool {cmd {stdin {}}} {
    if {$stdin ne ""} {
        set rc [catch {exec {*}$::tlimit {*}$cmd << $stdin 2>@1} out opts]
    } else {
        set rc [catch {exec {*}$::tlimit {*}$cmd 2>@1} out opts]
    }
    if {$rc} {
        fail "[lindex $cmd 0] failed: $out"
    }
    return $out
}

# Run a tool and return its stdout as raw bytes.
proc run_tool_binary {cmd} {
    set f [open |[concat $::tlimit $cmd] r]
    fconfigure $f -translation binary
    set out [read $f]
    if {[catch {close $f} err]} { fail "[lindex $cmd 0] failed: $err" }
    return $out
}

start_server {tags {cli}} {
    test {redis-cli reads commands from a pipe} {
        need $::cli redis-cli
        r del a
        set out [run_tool [list $::cli -p [srv 0 port]] "set a b\nget a\nexists a\nget nokey\n"]
        split $out "\n"
    } {OK b 1 {}}

    test {redis-cli with a command on the command line} {
        need $::cli redis-cli
        run_tool [list $::cli -p [srv 0 port] set clikey "value with spaces"]
        r get clikey
    } {value with spaces}

    test {redis-cli over the unix socket} {
        need $::cli redis-cli
        run_tool [list $::cli -s [srv 0 unixsocket] ping]
    } {PONG}

    test {redis-cli --scan --pattern} {
        need $::cli redis-cli
        r flushall
        for {set i 0} {$i < 200} {incr i} { r set k$i $i; r set other$i $i }
        set out [run_tool [list $::cli -p [srv 0 port] --scan --pattern k*]]
        set keys [lsort [split [string trim $out] "\n"]]
        assert_equal 200 [llength $keys]
        assert_equal [lsort [r keys k*]] $keys
    }

    test {redis-cli -r repeats a command} {
        need $::cli redis-cli
        set out [run_tool [list $::cli -p [srv 0 port] -r 5 ping]]
        split [string trim $out] "\n"
    } {PONG PONG PONG PONG PONG}

    # redis-cli 7 builds its `help` lines and its as-you-type hints from
    # COMMAND DOCS "arguments"; a line with only the name means it found none.
    proc cli_help_line {cmd} {
        set out [run_tool [list $::cli -p [srv 0 port] help {*}$cmd]]
        regsub -all {\x1b\[[0-9;]*m} $out {} out
        return [string trim [lindex [split [string trim $out] "\n"] 0]]
    }

    test {redis-cli help shows the arguments COMMAND DOCS lists (its hints use the same)} {
        need $::cli redis-cli
        assert_equal {SET key value [NX|XX] [GET] [EX seconds|PX milliseconds|EXAT unix-time-seconds|PXAT unix-time-milliseconds|KEEPTTL]} \
            [cli_help_line set]
        assert_equal {MSET key value [key value ...]} [cli_help_line mset]
        assert_equal {CONFIG SET parameter value [parameter value ...]} [cli_help_line {config set}]
    }

    tags {mooncake} {
        test {redis-cli help for the store commands} {
            need $::cli redis-cli
            assert_equal {MOUNT name size [ENDPOINT uri [ENDPOINT uri ...]] [BASE address] [RKEY rkey] [TIER MEMORY|DISK|VRAM] [HOST host] [TOKEN token] [OWNER owner]} \
                [cli_help_line mount]
            assert_equal {PUT.START key size [REPLICAS count] [PREFER segment [PREFER segment ...]] [HINT segment [HINT segment ...]] [PIN milliseconds] [HARDPIN] [REPLACE]} \
                [cli_help_line put.start]
            assert_equal {SEG.READV segment-id offset length [offset length ...]} [cli_help_line seg.readv]
        }
    }

    test {redis-cli reports error replies} {
        need $::cli redis-cli
        set out [run_tool [list $::cli -p [srv 0 port] no-such-command x]]
        assert_match {*ERR unknown command*} $out
    }

    test {redis-cli --rdb and --replica end at once with the reason (no RDB snapshots), not an unknown command} {
        need $::cli redis-cli
        set path [tmpfile dump.rdb]
        set rc [catch {exec {*}$::tlimit $::cli -p [srv 0 port] --rdb $path 2>@1} out]
        assert_equal 1 $rc "redis-cli --rdb exit status ($out)"
        assert_match {*SYNC with master failed: -ERR SYNC is not supported: there are no RDB snapshots*} $out
        assert_equal 0 [file exists $path]
        set rc [catch {exec {*}$::tlimit $::cli -p [srv 0 port] --replica 2>@1} out]
        assert_equal 1 $rc "redis-cli --replica exit status ($out)"
        assert_match {*SYNC is not supported*} $out
        assert_equal PONG [r ping]
    }

    test {redis-cli --bigkeys and --memkeys scan the keyspace and report the strings} {
        need $::cli redis-cli
        r flushall
        for {set i 0} {$i < 20} {incr i} { r set big:$i [string repeat x [expr {$i * 10 + 1}]] }
        set out [run_tool [list $::cli -p [srv 0 port] --bigkeys]]
        assert_match {*Biggest string found '"big:19"' has 191 bytes*} $out
        assert_match {*20 strings with*} $out
        set out [run_tool [list $::cli -p [srv 0 port] --memkeys]]
        assert_match {*20 strings with*bytes*} $out
    }

    test {redis-cli --pipe with 10000 SETs} {
        need $::cli redis-cli
        r flushall
        set path [tmpfile pipe.resp]
        set f [open $path w]
        fconfigure $f -translation binary
        for {set i 0} {$i < 10000} {incr i} {
            puts -nonewline $f [::redis::format_command SET pipe:$i value:$i]
        }
        close $f
        set rc [catch {exec {*}$::tlimit $::cli -p [srv 0 port] --pipe < $path 2>@1} out]
        file delete $path
        assert_equal 0 $rc "redis-cli --pipe exit status ($out)"
        assert_match {*errors: 0, replies: 10000*} $out
        assert_equal 10000 [r dbsize]
        r get pipe:9999
    } {value:9999}

    test {redis-cli --raw prints binary values as they are} {
        need $::cli redis-cli
        set v "bin\x00\x01\xff\r\nary"
        r set binkey $v
        run_tool_binary [list $::cli -p [srv 0 port] --raw get binkey]
    } "bin\x00\x01\xff\r\nary\n"

    test {redis-cli with a password} {
        need $::cli redis-cli
        r config set requirepass clipass
        set out [run_tool [list $::cli -p [srv 0 port] --no-auth-warning -a clipass ping]]
        set c [redis_client]
        $c auth clipass
        $c config set requirepass ""
        $c close
        set out
    } {PONG}

    test {redis-benchmark SET and GET} {
        need $::bench redis-benchmark
        set out [run_tool [list $::bench -p [srv 0 port] -t set,get -n 2000 -q]]
        foreach cmd {SET GET} {
            if {![regexp "$cmd: (\[0-9.\]+) requests per second" $out -> rps]} {
                fail "no $cmd result in: $out"
            }
            assert_morethan $rps 0
        }
    }

    test {redis-benchmark SET and GET pipelined (-P 16)} {
        need $::bench redis-benchmark
        set out [run_tool [list $::bench -p [srv 0 port] -t set,get -n 10000 -P 16 -q]]
        foreach cmd {SET GET} {
            if {![regexp "$cmd: (\[0-9.\]+) requests per second" $out -> rps]} {
                fail "no $cmd result in: $out"
            }
            assert_morethan $rps 0
        }
    }

    test {redis-benchmark with large values (-d 100000)} {
        need $::bench redis-benchmark
        set out [run_tool [list $::bench -p [srv 0 port] -t set,get -n 200 -d 100000 -q]]
        assert_match {*SET: *requests per second*} $out
        assert_match {*GET: *requests per second*} $out
    }

    test {redis-py client} {
        need $::syspython /usr/bin/python3
        if {[catch {exec $::syspython -c "import redis"} err]} {
            skip "redis-py is not installed for /usr/bin/python3"
        }
        set script [file join $::harness(testsdir) helpers redis_py_check.py]
        set rc [catch {exec {*}$::tlimit $::syspython $script [srv 0 host] [srv 0 port] 2>@1} out]
        if {$rc || ![string match "*ALL OK*" $out]} {
            fail "redis-py check failed:\n$out"
        }
        verbose_puts $out
    }
}
