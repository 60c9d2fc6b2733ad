# tcp-congestion and tcp-notsent-lowat: how the server tunes the sockets of
# its TCP clients. The server's side of a connection is read with ss
# (iproute2), which names each socket's congestion control.

proc available_cc {} { string trim [__read_from__ /proc/sys/net/ipv4/tcp_available_congestion_control 0] }
proc system_cc {} { string trim [__read_from__ /proc/sys/net/ipv4/tcp_congestion_control 0] }

# The congestion control of the server's end of the connection fd.
proc server_side_cc {fd} {
    set cport [lindex [fconfigure $fd -sockname] 2]
    set out [exec [find_program ss] -tnHi state established \
                 "( sport = :[srv port] and dport = :$cport )"]
    set known [available_cc]
    foreach tok [split $out " \t\n"] {
        if {$tok in $known} { return $tok }
    }
    fail "no congestion control in ss output for port $cport: $out"
}

# A new client that has been through the server's accept path.
proc tuned_client {} {
    set fd [raw_connect]
    puts -nonewline $fd "PING\r\n"
    lassign [raw_read $fd] data
    assert_equal "+PONG\r\n" $data
    return $fd
}

start_server {tags {tcptune} overrides {segment-size 64mb segment-prefault no}} {
    test {tcp-congestion and tcp-notsent-lowat defaults} {
        list [r config get tcp-congestion] [r config get tcp-notsent-lowat]
    } {{tcp-congestion auto} {tcp-notsent-lowat 16384}}

    test {tcp-congestion refuses an algorithm the kernel lacks, and keeps its value} {
        assert_error {*can't be used here*} {r config set tcp-congestion no-such-cc}
        assert_error {*'auto', 'system' or an algorithm name*} {r config set tcp-congestion ""}
        assert_error {*can't be used here*} {r config set tcp-congestion [string repeat x 40]}
        lindex [r config get tcp-congestion] 1
    } {auto}

    test {tcp-notsent-lowat takes 0 .. INT_MAX bytes} {
        assert_error {ERR CONFIG SET failed*} {r config set tcp-notsent-lowat -1}
        assert_error {ERR CONFIG SET failed*} {r config set tcp-notsent-lowat 4gb}
        r config set tcp-notsent-lowat 1mb
        set v [lindex [r config get tcp-notsent-lowat] 1]
        r config set tcp-notsent-lowat 16kb
        set v
    } {1048576}

    if {[find_program ss] eq ""} {
        test {congestion control of accepted clients (needs ss from iproute2)} {
            skip "ss (iproute2) is not installed"
        }
    } else {
        test {tcp-congestion NAME applies to every new TCP client} {
            # Reno is built in and allowed to every process.
            r config set tcp-congestion reno
            set fd [tuned_client]
            set cc [server_side_cc $fd]
            close $fd
            set cc
        } {reno}

        test {tcp-congestion system leaves the system default} {
            r config set tcp-congestion system
            set fd [tuned_client]
            set cc [server_side_cc $fd]
            close $fd
            assert_equal [system_cc] $cc
        }

        test {tcp-congestion auto: same-host clients are not paced} {
            r config set tcp-congestion auto
            set fd [tuned_client]
            set cc [server_side_cc $fd]
            close $fd
            if {[string match bbr* [system_cc]]} {
                # CUBIC where this process may set it, else Reno.
                assert {$cc in {cubic reno}}
            } else {
                assert_equal [system_cc] $cc
            }
        }

        test {A change applies to new clients; connected ones keep theirs} {
            r config set tcp-congestion reno
            set old [tuned_client]
            r config set tcp-congestion system
            set new [tuned_client]
            set got [list [server_side_cc $old] [server_side_cc $new]]
            close $old
            close $new
            r config set tcp-congestion auto
            assert_equal [list reno [system_cc]] $got
        }
    }

    # A small low-water mark makes every large reply a run of short writes
    # resumed on writability: nothing may be lost, reordered or stalled.
    foreach lowat {1 16kb 0} {
        test "Pipelined large GETs arrive whole with tcp-notsent-lowat $lowat" {
            r config set tcp-notsent-lowat $lowat
            set c [redis_client]
            set sizes {4194304 1048577 65536 3000000}
            set i 0
            foreach n $sizes {
                $c set tt:$i [pattern_bytes $n $i]
                incr i
            }
            set d [redis_deferring_client]
            for {set round 0} {$round < 3} {incr round} {
                for {set i 0} {$i < [llength $sizes]} {incr i} { $d get tt:$i }
            }
            for {set round 0} {$round < 3} {incr round} {
                for {set i 0} {$i < [llength $sizes]} {incr i} {
                    set v [$d read]
                    assert_equal [lindex $sizes $i] [string length $v]
                    assert {$v eq [pattern_bytes [lindex $sizes $i] $i]}
                }
            }
            $d close
            $c close
            r config set tcp-notsent-lowat 16kb
            r dbsize
        } {4}
    }
}
