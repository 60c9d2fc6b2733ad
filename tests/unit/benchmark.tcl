# Benchmarks a newcomer can run (issue 12): src/mooncake-benchmark without
# -n sizes each test by the value bytes it moves, so 16 MiB values mean 64
# requests and 16 clients, not 100,000 requests by 50 (a quarter of an hour);
# an explicit -n is still exact; --max-time stops a test and says so; the
# progress line shows on a terminal (or with --progress) and never in
# redirected output. The shell tools' elapsed-time counter (utils/tick.sh)
# follows the same rule, and every shell tool still parses.
#
# Sizing is checked with GETs of keys nobody wrote: every reply is a nil,
# so a test that plans 64 requests of 16 MiB moves no bytes at all and the
# file stays fast. Nothing here asserts a timing, only counts and texts.

set ::benchbin [file join $::harness(root) src mooncake-benchmark]
set ::py [find_program /usr/bin/python3]
set ::pty_run [file join $::harness(testsdir) helpers pty_run.py]

# A command's stdout and stderr together, byte for byte: exec would turn
# every "\r" into "\n", and "\r" is what progress is made of.
proc run_raw {args} {
    set f [open |[list {*}$args 2>@1] r]
    fconfigure $f -translation binary
    set out [read $f]
    close $f
    return $out
}

# mooncake-benchmark against the innermost server's unix socket, its output
# going to a pipe (not a terminal).
proc bench {args} {
    if {![file executable $::benchbin]} { fail "$::benchbin is not built (make -C src all)" }
    run_raw $::benchbin -s [srv 0 unixsocket] {*}$args
}

# The same on a pseudo-terminal.
proc bench_on_tty {args} {
    if {$::py eq ""} { skip "/usr/bin/python3 is not installed" }
    run_raw $::py $::pty_run $::benchbin -s [srv 0 unixsocket] {*}$args
}

# The "requests" column of each CSV row, in order.
proc csv_requests {out} {
    set n {}
    foreach line [lrange [split [string trim $out] "\n"] 1 end] {
        lappend n [lindex [split $line ,] 3]
    }
    return $n
}

start_server {tags {benchmark} overrides {segment-size 64mb segment-prefault no}} {
    test {Without -n a test moves 1 GiB: 1m -> 1024 requests, 16m -> 64, by 16 clients} {
        set out [bench -t get -d 1m,16m]
        assert_match "*GET 1MiB*1024 requests, 16 clients,*nil replies: 1024*" $out
        assert_match "*GET 16MiB*64 requests, 16 clients,*nil replies: 64*" $out
        assert_no_match "*stopped by --max-time*" $out
    }

    test {Without -n small values keep 100000 requests and 50 clients} {
        # The CSV count is what a script would read; 50 clients from the
        # long format of a cheap run.
        assert_equal {100000} [csv_requests [bench -t get -d 4k --csv]]
        assert_match "*100 requests, 50 clients,*" [bench -t get -d 4k -n 100]
    }

    test {Without -n the library rows are sized the same way and run one client} {
        set out [bench -t mcget -d 16m]
        assert_match "*mc_get auto 16MiB*64 calls, 1 client threads*" $out
    }

    test {An explicit -n is honoured exactly, in both engines} {
        assert_equal {100 100} [csv_requests [bench -t ping,get -d 16m -n 100 --csv]]
        assert_equal {7} [csv_requests [bench -t mcget -d 16m -n 7 --csv]]
    }

    test {--max-time stops a test early and the report says so} {
        set out [bench -t ping -c 2 -n 1000000000 --max-time 0.3]
        assert_match "*stopped by --max-time 0.3 s after * requests*" $out
        regexp {  ([0-9]+) requests,} $out -> n
        assert_lessthan $n 1000000000
        assert_match "*memcpy hot 1MiB:*(max-time 0.3 s)*" [bench -t memcpyhot -d 1m -n 1000000000 --max-time 0.3 -q]
    }

    test {No progress text when stdout is not a terminal} {
        # 0.6 s: two refreshes would have been drawn. Whether to draw is
        # decided once for every engine (progressInit).
        set out [bench -t ping --duration 0.6 -q]
        assert_no_match "*\r*" $out
        assert_no_match "*rps=*" $out
        assert_match "PING:*ops/s*ms\n" $out
    }

    test {--progress draws rate, elapsed and ETA, and erases the line before each result} {
        set out [bench -t ping,memcpyhot -d 1m --duration 0.6 -q --progress]
        assert_match "*\rPING: * rps=* (overall: *) * s, ETA * s*" $out
        assert_match "*\rmemcpy hot 1MiB: * rps=*ETA*" $out
        # Each result starts on a clean line: the last progress text was
        # overwritten with spaces and the cursor sent back.
        assert {[regexp {\r +\rPING: +[0-9.]+ ops/s} $out]}
        assert {[regexp {\r +\rmemcpy hot 1MiB: +[0-9.]+ ops/s} $out]}
        # --no-progress wins over a terminal.
        set out [bench_on_tty -t ping --duration 0.4 -q --no-progress]
        assert_no_match "*rps=*" $out
    }

    test {On a terminal progress shows without being asked; --csv keeps it off} {
        set out [bench_on_tty -t ping -n 1000000000 --max-time 0.6 -q]
        assert_match "*\rPING: */1000000000 (*%) rps=*ETA*" $out
        set out [bench_on_tty -t ping --duration 0.4 --csv]
        assert_no_match "*rps=*" $out
    }
}

tags {benchmark} {
    test {The shell tools parse (bash -n, sh -n) and answer --help} {
        set utils [file join $::harness(root) utils]
        foreach f {bench-vs-redis.sh bench-cluster.sh bench-compare.sh} {
            exec bash -n [file join $utils bench $f]
            assert_match "*--runs K*" [exec [file join $utils bench $f] --help]
        }
        # The regression guard refuses what it cannot run, before building anything.
        assert_error {*one REV only*} {exec [file join $utils bench bench-compare.sh] HEAD HEAD~1}
        assert_error {*not a revision*} {exec [file join $utils bench bench-compare.sh] no-such-rev-xyz}
        assert_error {*positive number*} {exec [file join $utils bench bench-compare.sh] --runs 0 HEAD}
        # The log-load benchmark refuses bad arguments before starting anything.
        assert_error {*--keys >= 1*} {exec /usr/bin/python3 [file join $utils bench bench-aof-load.py] --keys 0}
        assert_match "*--objects*" [exec /usr/bin/python3 [file join $utils bench bench-aof-load.py] --help]
        exec sh -n [file join $utils create-cluster]
        exec sh -n [file join $utils tick.sh]
        assert_match "*start*create*stop*" [exec [file join $utils create-cluster] help]
    }

    test {Every utility runs as the docs write it: a #! script is executable, answers --help, refuses a bad flag} {
        # bench-sessions.py, run as BENCHMARKS.md writes it, was "Permission
        # denied"; four scripts died on --help or a bad argument with a
        # traceback (bench-interleaved, bench-idle-clients, bench-sparse-cpu,
        # bench-zerofree); gpu-check.sh answered --help with exit 2.
        set utils [file join $::harness(root) utils]
        set n 0
        foreach f [lsort [concat [glob [file join $utils *]] [glob [file join $utils bench *]]]] {
            if {![file isfile $f]} continue
            set fd [open $f]
            set first [gets $fd]
            close $fd
            if {![string match "#!*" $first]} continue
            incr n
            set name [file tail $f]
            if {![file executable $f]} { fail "$name has #! but is not executable" }
            # Python scripts under /usr/bin/python3, whatever python3 comes first on PATH,
            # with the sanitizer runtimes preloaded where the binding they may import has them.
            set run [expr {[string match "*python*" $first] ? [list env {*}[python_sanitizer_env] /usr/bin/python3 $f]
                                                             : [list $f]}]
            assert_equal 0 [catch {exec {*}$run --help 2>@1} out] "$name --help: $out"
            assert_morethan [string length $out] 40
            assert_equal 1 [catch {exec {*}$run --no-such-flag < /dev/null} out] "$name --no-such-flag ran"
            assert_no_match "*Traceback*" $out
            assert_match "*no-such-flag*" $out
        }
        assert_morethan $n 15
    }

    test {bench-sessions.py runs from the checkout as BENCHMARKS.md writes it, without PYTHONPATH} {
        # It imported mooncake from sys.path alone: ModuleNotFoundError unless
        # the caller set PYTHONPATH=build/python, which BENCHMARKS.md does not.
        if {![file isdirectory [file join $::harness(root) build python mooncake]]} { skip "the binding is not built" }
        set saved [array get ::env PYTHONPATH]
        unset -nocomplain ::env(PYTHONPATH)
        set rc [catch {exec env {*}[python_sanitizer_env] /usr/bin/python3 \
                           [file join $::harness(root) utils bench bench-sessions.py] \
                           --rounds 1 --blocks 2 --layers 2 --transport tcp 2>@1} out]
        array set ::env $saved
        assert_equal 0 $rc $out
        assert_match "*session*per-layer*at-end*" $out
    }

    test {mooncake-benchmark names an unknown option as unknown wherever it stands, and a missing value as missing} {
        if {![file executable $::benchbin]} { fail "$::benchbin is not built (make -C src all)" }
        # A last unknown option used to read "needs a value (or is unknown)".
        foreach argv {{--bogus} {-q --bogus} {--bogus -q} {-q --bogus 5}} {
            assert_equal 1 [catch {exec $::benchbin {*}$argv} out] "$argv: $out"
            assert_match "mooncake-benchmark: unknown option --bogus\n*" $out
        }
        assert_equal 1 [catch {exec $::benchbin -q -n} out]
        assert_match "mooncake-benchmark: option -n needs a value\n*" $out
    }

    test {Every option mooncake-benchmark parses is listed by its --help} {
        if {![file executable $::benchbin]} { fail "$::benchbin is not built (make -C src all)" }
        set fd [open [file join $::harness(root) src mooncake-benchmark.c]]
        set src [read $fd]
        close $fd
        set help [exec $::benchbin --help]
        set opts [lsort -unique [regexp -all -inline {"-[-a-zA-Z]+"} $src]]
        assert_morethan [llength $opts] 20
        foreach o $opts {
            set o [string trim $o {"}]
            # --iov was parsed and named in the text of another option, never listed.
            if {![regexp -line "^ $o\\M" $help]} { fail "--help does not list $o" }
        }
    }

    test {utils/tick.sh: a counter on a terminal that erases itself, nothing in a pipe} {
        set tick [file join $::harness(root) utils tick.sh]
        set script ". '$tick'; printf 'step: '; TICK_INTERVAL=0.2; tick_start; sleep 0.5; tick_stop; echo done"
        assert_equal "step: done\n" [run_raw sh -c $script]
        if {$::py eq ""} { skip "/usr/bin/python3 is not installed" }
        set out [run_raw $::py $::pty_run sh -c $script]
        # " [N s]" then the cursor stepped back over it, then erased.
        assert {[regexp {^step:  \[[0-9]+ s\]\033\[[0-9]+D.*\033\[Kdone} $out]}
    }
}
