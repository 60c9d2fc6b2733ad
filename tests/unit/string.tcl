# The string and bitmap commands beyond SET/GET (keyspace.tcl has those):
# SETNX, SETEX, PSETEX, GETEX, GETDEL, GETSET, MSETNX, APPEND, SETRANGE,
# GETRANGE (SUBSTR), the INCR family, INCRBYFLOAT, SETBIT, GETBIT, BITCOUNT, BITPOS, LCS and
# OBJECT ENCODING of what they leave. Everything outside the mooncake block
# runs against redis-server 7 too (--server-binary), so the replies, the
# errors and their order are Redis's byte for byte. The mooncake block:
# what these commands do with store objects (PUT.START/PUT.END) and with
# our own limits (max-object-size, max-key-size).

start_server {tags {string}} {
    # ---- SET and its older forms ----------------------------------------

    test {SETNX sets a missing key only, 1 or 0} {
        r del nx
        assert_equal 1 [r setnx nx first]
        assert_equal 0 [r setnx nx second]
        r get nx
    } {first}

    test {SETNX on an expired key sets it} {
        r set nx old PX 1
        after 20
        assert_equal 1 [r setnx nx new]
        assert_equal -1 [r ttl nx]
        r get nx
    } {new}

    test {SETEX and PSETEX set a value with a time to live} {
        assert_equal OK [r setex sx 100 v]
        assert_range [r ttl sx] 99 100
        assert_equal v [r get sx]
        assert_equal OK [r psetex sx 100000 w]
        assert_range [r pttl sx] 99000 100000
        r get sx
    } {w}

    test {SETEX and PSETEX refuse a bad time, the key untouched} {
        r set sx keep
        assert_error {ERR invalid expire time in 'setex' command*} {r setex sx 0 v}
        assert_error {ERR invalid expire time in 'setex' command*} {r setex sx -10 v}
        assert_error {ERR invalid expire time in 'setex' command*} {r setex sx 9223372036854775807 v}
        assert_error {ERR invalid expire time in 'psetex' command*} {r psetex sx 0 v}
        assert_error {ERR invalid expire time in 'psetex' command*} {r psetex sx 9223372036854775807 v}
        assert_error {ERR value is not an integer or out of range*} {r setex sx abc v}
        assert_error {ERR value is not an integer or out of range*} {r psetex sx 1.5 v}
        assert_equal -1 [r ttl sx]
        r get sx
    } {keep}

    test {SET options follow Redis's rules: repeats allowed, conflicts refused} {
        r del so
        assert_equal OK [r set so v NX NX]
        assert_equal v [r set so w XX XX GET GET]
        assert_equal w [r get so]
        assert_equal OK [r set so v EX 10 EX 100]
        assert_range [r ttl so] 99 100
        assert_equal OK [r set so v KEEPTTL KEEPTTL]
        assert_range [r ttl so] 99 100
        assert_error {ERR syntax error*} {r set so v KEEPTTL EX 10}
        assert_error {ERR syntax error*} {r set so v EX 10 KEEPTTL}
        assert_error {ERR syntax error*} {r set so v PX 10 EXAT 10}
        assert_error {ERR syntax error*} {r set so v XX NX}
        assert_error {ERR syntax error*} {r set so v PERSIST}
    }

    test {SET reads every option word before the expire value} {
        assert_error {ERR syntax error*} {r set so v EX abc FOO}
        assert_error {ERR value is not an integer or out of range*} {r set so v EX abc}
        assert_error {ERR invalid expire time in 'set' command*} {r set so v EX 9223372036854775807}
    }

    test {SET EXAT or PXAT in the past: OK, and the key is gone} {
        assert_equal OK [r set past v EXAT 1]
        assert_equal 0 [r exists past]
        assert_equal OK [r set past v PXAT 1000]
        r exists past
    } {0}

    test {SET EXAT and PXAT in the future} {
        set at [expr {[clock seconds] + 1000}]
        r set fut v EXAT $at
        assert_range [r ttl fut] 998 1000
        r set fut v PXAT [expr {$at * 1000}]
        assert_range [r ttl fut] 998 1000
    }

    test {GETSET returns the old value and clears the time to live} {
        r del gs
        assert_equal {} [r getset gs one]
        assert_equal {$-1} [r lastheader]
        r expire gs 100
        assert_equal one [r getset gs two]
        assert_equal -1 [r ttl gs]
        r get gs
    } {two}

    test {GETDEL returns the value and deletes the key} {
        r set gd v EX 100
        assert_equal v [r getdel gd]
        assert_equal 0 [r exists gd]
        assert_equal {} [r getdel gd]
        assert_equal {$-1} [r lastheader]
    }

    test {GETEX without options is GET} {
        r set ge v EX 100
        assert_equal v [r getex ge]
        assert_range [r ttl ge] 99 100
    }

    test {GETEX EX, PX, EXAT, PXAT and PERSIST} {
        r set ge v
        assert_equal v [r getex ge EX 100]
        assert_range [r ttl ge] 99 100
        assert_equal v [r getex ge PX 50000]
        assert_range [r pttl ge] 49000 50000
        set at [expr {[clock seconds] + 1000}]
        assert_equal v [r getex ge EXAT $at]
        assert_range [r ttl ge] 998 1000
        assert_equal v [r getex ge PXAT [expr {$at * 1000 + 500}]]
        assert_range [r ttl ge] 998 1001
        assert_equal v [r getex ge PERSIST]
        assert_equal -1 [r ttl ge]
        assert_equal v [r getex ge persist persist]
    }

    test {GETEX with an EXAT or PXAT already past returns the value and deletes the key} {
        r set ge v
        assert_equal v [r getex ge EXAT 1]
        assert_equal 0 [r exists ge]
        r set ge v
        assert_equal v [r getex ge PXAT 1]
        r exists ge
    } {0}

    test {GETEX errors in Redis's order} {
        r set ge v
        assert_error {ERR syntax error*} {r getex ge PERSIST EX 10}
        assert_error {ERR syntax error*} {r getex ge EX 10 PX 10}
        assert_error {ERR syntax error*} {r getex ge KEEPTTL}
        assert_error {ERR syntax error*} {r getex ge NX}
        assert_error {ERR syntax error*} {r getex ge EX}
        assert_error {ERR syntax error*} {r getex ge EX abc FOO}
        assert_error {ERR value is not an integer or out of range*} {r getex ge EX abc}
        assert_error {ERR invalid expire time in 'getex' command*} {r getex ge EX -1}
        assert_error {ERR invalid expire time in 'getex' command*} {r getex ge PX 0}
        # A missing key is nil before the time is read.
        r del nokey
        assert_equal {} [r getex nokey EX -1]
        assert_equal {} [r getex nokey EX abc]
        assert_equal -1 [r ttl ge]
    }

    test {MSETNX sets every key or none} {
        r del mx1 mx2 mx3
        assert_equal 1 [r msetnx mx1 a mx2 b]
        assert_equal {a b} [r mget mx1 mx2]
        assert_equal 0 [r msetnx mx3 c mx2 z]
        assert_equal 0 [r exists mx3]
        assert_equal b [r get mx2]
        assert_equal 1 [r msetnx mx3 c mx3 d]
        r get mx3
    } {d}

    test {SETNX, SETEX, PSETEX, GETSET and MSETNX of large values} {
        r del lv1 lv2 lv3 lv4 lv5
        set v [pattern_bytes 200000 5]
        set w [pattern_bytes 100000 6]
        assert_equal 1 [r setnx lv1 $v]
        assert_equal 0 [r setnx lv1 $w]
        assert_equal OK [r setex lv2 100 $v]
        assert_equal OK [r psetex lv3 100000 $v]
        assert_equal {} [r getset lv4 $v]
        assert_equal $v [r getset lv4 $w]
        assert_equal 1 [r msetnx lv5 $v lv6 $w]
        assert_equal 0 [r msetnx lv7 $v lv5 $w]
        assert_equal 0 [r exists lv7]
        foreach {k want} [list lv1 $v lv2 $v lv3 $v lv4 $w lv5 $v lv6 $w] {
            assert {[r get $k] eq $want}
        }
        r del lv1 lv2 lv3 lv4 lv5 lv6
    }

    test {MSETNX arity} {
        assert_error {ERR wrong number of arguments for 'msetnx' command*} {r msetnx a}
        assert_error {ERR wrong number of arguments for 'msetnx' command*} {r msetnx a b c}
    }

    # ---- APPEND, SETRANGE, GETRANGE ----------------------------------------

    test {APPEND creates a key and appends to it} {
        r del ap
        assert_equal 5 [r append ap hello]
        assert_equal 11 [r append ap " world"]
        assert_equal 11 [r append ap ""]
        r get ap
    } {hello world}

    test {APPEND of binary bytes} {
        r del ap
        r append ap "a\x00b"
        r append ap "\r\n\xff"
        r get ap
    } "a\x00b\r\n\xff"

    test {APPEND keeps the time to live} {
        r set ap v EX 100
        r append ap w
        assert_range [r ttl ap] 99 100
        r get ap
    } {vw}

    test {APPEND many times: every version is the last plus one piece} {
        r del ap
        set want {}
        for {set i 0} {$i < 200} {incr i} {
            set piece [randstring 0 20 alpha]
            append want $piece
            assert_equal [string length $want] [r append ap $piece]
        }
        assert_equal $want [r get ap]
    }

    test {SETRANGE overwrites and pads with zero bytes} {
        r set sr "Hello World"
        assert_equal 11 [r setrange sr 6 Redis]
        assert_equal "Hello Redis" [r get sr]
        r del sr2
        assert_equal 8 [r setrange sr2 5 abc]
        assert_equal "\x00\x00\x00\x00\x00abc" [r get sr2]
        assert_equal 14 [r setrange sr 12 xy]
        r get sr
    } "Hello Redis\x00xy"

    test {SETRANGE with an empty value creates nothing and returns the length} {
        r del sr3
        assert_equal 0 [r setrange sr3 0 ""]
        assert_equal 0 [r setrange sr3 100 ""]
        assert_equal 0 [r exists sr3]
        r set sr3 abc
        assert_equal 3 [r setrange sr3 10 ""]
        r get sr3
    } {abc}

    test {SETRANGE keeps the time to live} {
        r set sr v EX 100
        r setrange sr 0 w
        assert_range [r ttl sr] 99 100
        r get sr
    } {w}

    test {SETRANGE offset errors} {
        assert_error {ERR offset is out of range*} {r setrange sr -1 x}
        assert_error {ERR value is not an integer or out of range*} {r setrange sr abc x}
        assert_error {ERR value is not an integer or out of range*} {r setrange sr 99999999999999999999 x}
    }

    test {SETRANGE and APPEND past proto-max-bulk-len} {
        set old [lindex [r config get proto-max-bulk-len] 1]
        r config set proto-max-bulk-len 1048576
        r del lim
        assert_error {ERR string exceeds maximum allowed size (proto-max-bulk-len)*} {r setrange lim 1048576 x}
        assert_equal 0 [r exists lim]
        assert_equal 1048576 [r setrange lim 1048575 x]
        assert_error {ERR string exceeds maximum allowed size (proto-max-bulk-len)*} {r append lim y}
        assert_equal 1048576 [r strlen lim]
        assert_error {ERR string exceeds maximum allowed size (proto-max-bulk-len)*} {r setrange lim 9223372036854775807 x}
        r config set proto-max-bulk-len $old
        r del lim
    }

    test {GETRANGE ranges} {
        r set gr "This is a string"
        assert_equal "This" [r getrange gr 0 3]
        assert_equal "ing" [r getrange gr -3 -1]
        assert_equal "This is a string" [r getrange gr 0 -1]
        assert_equal "string" [r getrange gr 10 100]
        assert_equal "" [r getrange gr 5 3]
        assert_equal "" [r getrange gr -1 -5]
        assert_equal "This is a string" [r getrange gr -100 -1]
        assert_equal "T" [r getrange gr -100 -16]
        assert_equal "T" [r getrange gr 0 -100]
        assert_equal "" [r getrange gr 16 20]
        r set gr 1234
        assert_equal 23 [r getrange gr 1 2]
        assert_equal {} [r getrange nokey 0 -1]
        assert_equal {$0} [r lastheader]
    }

    # ---- the INCR family ---------------------------------------------------

    test {INCR, INCRBY, DECR, DECRBY} {
        r del n
        assert_equal 1 [r incr n]
        assert_equal 11 [r incrby n 10]
        assert_equal 10 [r decr n]
        assert_equal 5 [r decrby n 5]
        assert_equal -5 [r incrby n -10]
        assert_equal 0 [r decrby n -5]
        r get n
    } {0}

    test {INCR of an existing integer, negative included} {
        r set n -100
        assert_equal -99 [r incr n]
        r set n 9223372036854775806
        r incr n
    } {9223372036854775807}

    test {INCR keeps the time to live} {
        r set n 1 EX 100
        r incr n
        assert_range [r ttl n] 99 100
        r incrby n 5
        r decr n
        assert_range [r ttl n] 99 100
        r get n
    } {6}

    test {INCR of a value that is not an integer} {
        foreach v {abc "" " 1" "1 " "+1" "007" "1.5" "-0" "9223372036854775808" "1\x00"} {
            r set n $v
            assert_error {ERR value is not an integer or out of range*} {r incr n}
            assert_equal $v [r get n]
        }
        assert_error {ERR value is not an integer or out of range*} {r incrby n abc}
        assert_error {ERR value is not an integer or out of range*} {r decrby n 1.0}
    }

    test {INCR overflow} {
        r set n 9223372036854775807
        assert_error {ERR increment or decrement would overflow*} {r incr n}
        assert_error {ERR increment or decrement would overflow*} {r incrby n 1}
        r set n -9223372036854775808
        assert_error {ERR increment or decrement would overflow*} {r decr n}
        assert_error {ERR increment or decrement would overflow*} {r incrby n -1}
        assert_error {ERR decrement would overflow*} {r decrby n -9223372036854775808}
        r del n
        assert_error {ERR decrement would overflow*} {r decrby n -9223372036854775808}
        assert_equal -9223372036854775807 [r decrby n 9223372036854775807]
        r get n
    } {-9223372036854775807}

    test {INCRBYFLOAT} {
        r set f 10.50
        assert_equal 10.6 [r incrbyfloat f 0.1]
        assert_equal 5.6 [r incrbyfloat f -5]
        r set f 5.0e3
        assert_equal 5200 [r incrbyfloat f 2.0e2]
        r del f
        assert_equal 3 [r incrbyfloat f 3]
        assert_equal 0 [r incrbyfloat f -3]
        assert_equal 0 [r incrbyfloat f -0]
        assert_equal 3.14159265358979324 [r incrbyfloat f 3.14159265358979323846]
        r set f 0x10
        r incrbyfloat f 1
    } {17}

    test {INCRBYFLOAT keeps the time to live} {
        r set f 1 EX 100
        r incrbyfloat f 1.5
        assert_range [r ttl f] 99 100
        r get f
    } {2.5}

    test {INCRBYFLOAT errors} {
        r set f abc
        assert_error {ERR value is not a valid float*} {r incrbyfloat f 1}
        r set f 1
        foreach bad {abc "" " 1" "1 " "nan" "1e5000" "1\x00"} {
            assert_error {ERR value is not a valid float*} {r incrbyfloat f $bad}
        }
        assert_error {ERR increment would produce NaN or Infinity*} {r incrbyfloat f inf}
        r set f inf
        assert_error {ERR increment would produce NaN or Infinity*} {r incrbyfloat f 1}
        r set f 1e308
        assert_equal 1 [string is double [r incrbyfloat f 1]]
        r set f 1
        r get f
    } {1}

    # ---- bits --------------------------------------------------------------

    test {SETBIT returns the old bit and grows the string with zeros} {
        r del b
        assert_equal 0 [r setbit b 1 1]
        assert_equal "\x40" [r get b]
        assert_equal 1 [r setbit b 1 0]
        assert_equal 0 [r setbit b 1 0]
        assert_equal 0 [r setbit b 23 1]
        assert_equal "\x00\x00\x01" [r get b]
        assert_equal 0 [r setbit b 0 1]
        r get b
    } "\x80\x00\x01"

    test {SETBIT of 0 past the end still creates and grows the key} {
        r del b
        assert_equal 0 [r setbit b 15 0]
        assert_equal 2 [r strlen b]
        assert_equal 0 [r setbit b 31 0]
        r strlen b
    } {4}

    test {SETBIT keeps the time to live} {
        r set b a EX 100
        r setbit b 7 0
        assert_range [r ttl b] 99 100
        r get b
    } {`}

    test {SETBIT and GETBIT errors} {
        assert_error {ERR bit offset is not an integer or out of range*} {r setbit b -1 1}
        assert_error {ERR bit offset is not an integer or out of range*} {r setbit b abc 1}
        assert_error {ERR bit offset is not an integer or out of range*} {r setbit b #1 1}
        assert_error {ERR bit is not an integer or out of range*} {r setbit b 0 2}
        assert_error {ERR bit is not an integer or out of range*} {r setbit b 0 -1}
        assert_error {ERR bit is not an integer or out of range*} {r setbit b 0 abc}
        assert_error {ERR bit offset is not an integer or out of range*} {r getbit b -1}
        assert_error {ERR bit offset is not an integer or out of range*} {r getbit b abc}
        # The offset is checked before the bit.
        assert_error {ERR bit offset is not an integer or out of range*} {r setbit b -1 abc}
    }

    test {SETBIT and GETBIT offsets are bounded by proto-max-bulk-len} {
        set old [lindex [r config get proto-max-bulk-len] 1]
        r config set proto-max-bulk-len 1048576
        assert_error {ERR bit offset is not an integer or out of range*} {r setbit lim 8388608 1}
        assert_error {ERR bit offset is not an integer or out of range*} {r getbit lim 8388608}
        assert_equal 0 [r setbit lim 8388607 1]
        assert_equal 1 [r getbit lim 8388607]
        assert_equal 1048576 [r strlen lim]
        r config set proto-max-bulk-len $old
        r del lim
    }

    test {GETBIT} {
        r set b "\x80\x01"
        assert_equal 1 [r getbit b 0]
        assert_equal 0 [r getbit b 1]
        assert_equal 1 [r getbit b 15]
        assert_equal 0 [r getbit b 16]
        assert_equal 0 [r getbit b 1000000]
        r del nokey
        r getbit nokey 5
    } {0}

    test {GETBIT of an integer value reads its digits} {
        r set b 1
        list [r getbit b 2] [r getbit b 3] [r getbit b 7]
    } {1 1 1}

    test {BITCOUNT whole string and byte ranges} {
        r set bc foobar
        assert_equal 26 [r bitcount bc]
        assert_equal 4 [r bitcount bc 0 0]
        assert_equal 6 [r bitcount bc 1 1]
        assert_equal 6 [r bitcount bc 1 1 BYTE]
        assert_equal 26 [r bitcount bc 0 -1]
        assert_equal 26 [r bitcount bc -100 100]
        assert_equal 4 [r bitcount bc -1 -1]
        assert_equal 0 [r bitcount bc 100 200]
        assert_equal 0 [r bitcount bc 3 2]
        assert_equal 0 [r bitcount bc -1 -2]
    }

    test {BITCOUNT bit ranges} {
        r set bc foobar
        assert_equal 17 [r bitcount bc 5 30 BIT]
        assert_equal 0 [r bitcount bc 7 7 bit]
        assert_equal 1 [r bitcount bc 6 6 bit]
        assert_equal 3 [r bitcount bc 6 10 BIT]
        assert_equal 26 [r bitcount bc 0 -1 BIT]
        assert_equal 4 [r bitcount bc -8 -1 BIT]
        assert_equal 0 [r bitcount bc 40 30 BIT]
    }

    test {BITCOUNT agrees with a count done here, random values and ranges} {
        for {set i 0} {$i < 50} {incr i} {
            set v [randstring 0 100 binary]
            r set bc $v
            set bits {}
            binary scan $v B* bits
            set want [string length [string map {0 {}} $bits]]
            assert_equal $want [r bitcount bc]
            set n [string length $bits]
            if {$n == 0} continue
            set s [expr {int(rand() * $n)}]
            set e [expr {$s + int(rand() * ($n - $s))}]
            set sub [string range $bits $s $e]
            assert_equal [string length [string map {0 {}} $sub]] [r bitcount bc $s $e BIT]
        }
    }

    test {BITPOS: Redis's documented cases, byte and bit ranges} {
        r set bp "\xff\xf0\x00"
        assert_equal 12 [r bitpos bp 0]
        r set bp "\x00\xff\xf0"
        assert_equal 8 [r bitpos bp 1 0]
        assert_equal 16 [r bitpos bp 1 2]
        assert_equal 16 [r bitpos bp 1 2 -1 BYTE]
        assert_equal 8 [r bitpos bp 1 7 15 BIT]
        assert_equal 8 [r bitpos bp 1 7 -3 bit]
        assert_equal -1 [r bitpos bp 1 3]
        assert_equal -1 [r bitpos bp 1 2 1]
        r set bp "\x00\x00\x00"
        assert_equal -1 [r bitpos bp 1]
        # A clear bit looked for without an end: the first bit past the
        # string (padded with 0s); with an end, -1 where the range has none.
        r set bp "\xff\xff\xff"
        assert_equal 24 [r bitpos bp 0]
        assert_equal 24 [r bitpos bp 0 1]
        assert_equal -1 [r bitpos bp 0 0 -1]
        assert_equal -1 [r bitpos bp 0 0 23 BIT]
        r set bp ""
        assert_equal -1 [r bitpos bp 0]
        assert_equal -1 [r bitpos bp 1]
        r del nokey
        assert_equal 0 [r bitpos nokey 0]
        assert_equal -1 [r bitpos nokey 1]
        assert_error "*bit argument must be 1 or 0*" {r bitpos bp 2}
        assert_error "*not an integer*" {r bitpos bp 1 x}
        assert_error "*syntax*" {r bitpos bp 1 0 1 WORD}
        # long runs are skipped a word at a time: the edges must still count
        r set bp "[string repeat \xff 100]\xfe[string repeat \x00 50]\x01"
        assert_equal 807 [r bitpos bp 0]
        assert_equal 807 [r bitpos bp 0 3]
        assert_equal -1 [r bitpos bp 0 0 99]
        assert_equal 0 [r bitpos bp 1]
        assert_equal 1215 [r bitpos bp 1 101]
        assert_equal 1215 [r bitpos bp 1 808 -1 BIT]
        assert_equal -1 [r bitpos bp 1 808 1214 BIT]
    }

    test {BITPOS agrees with a search done here, random values and bit ranges} {
        for {set i 0} {$i < 100} {incr i} {
            set v [randstring 0 60 binary]
            if {$i % 3 == 0} { set v "[string repeat \xff [expr {$i % 20}]][string repeat \x00 [expr {$i % 13}]]$v" }
            r set bp $v
            set bits {}
            binary scan $v B* bits
            set n [string length $bits]
            foreach bit {0 1} {
                set want [string first $bit $bits]
                if {$want < 0 && $bit == 0 && $n > 0} { set want $n }
                if {$n == 0} { set want -1 }
                assert_equal $want [r bitpos bp $bit]
                if {$n == 0} continue
                set s [expr {int(rand() * $n)}]
                set e [expr {$s + int(rand() * ($n - $s))}]
                set at [string first $bit [string range $bits $s $e]]
                assert_equal [expr {$at < 0 ? -1 : $s + $at}] [r bitpos bp $bit $s $e BIT]
            }
        }
    }

    test {SUBSTR is GETRANGE} {
        r set sub "Hello World"
        list [r substr sub 0 4] [r substr sub -5 -1] [r substr sub 100 200]
    } {Hello World {}}

    test {BITCOUNT of a missing key is 0, whatever the arguments} {
        r del nokey
        assert_equal 0 [r bitcount nokey]
        assert_equal 0 [r bitcount nokey 0]
        assert_equal 0 [r bitcount nokey a b c]
    }

    test {BITCOUNT errors, in Redis's order} {
        r set bc foobar
        assert_error {ERR syntax error*} {r bitcount bc 0}
        assert_error {ERR syntax error*} {r bitcount bc 0 1 FOO}
        assert_error {ERR syntax error*} {r bitcount bc 0 1 BIT x}
        assert_error {ERR value is not an integer or out of range*} {r bitcount bc a 1}
        assert_error {ERR value is not an integer or out of range*} {r bitcount bc 0 b}
        # A range wholly before the start is 0 before the unit is read.
        r bitcount bc -1 -2 FOO
    } {0}

    test {BITCOUNT of an empty value} {
        r set bc ""
        list [r bitcount bc] [r bitcount bc 0 -1] [r bitcount bc 0 -1 BIT]
    } {0 0 0}

    # ---- LCS -----------------------------------------------------------------

    test {LCS string, LEN and IDX (the documented example)} {
        r mset lcs1 ohmytext lcs2 mynewtext
        assert_equal mytext [r lcs lcs1 lcs2]
        assert_equal 6 [r lcs lcs1 lcs2 LEN]
        assert_equal {matches {{{4 7} {5 8}} {{2 3} {0 1}}} len 6} [r lcs lcs1 lcs2 IDX]
        assert_equal {matches {{{4 7} {5 8} 4}} len 6} [r lcs lcs1 lcs2 IDX MINMATCHLEN 4 WITHMATCHLEN]
        assert_equal {matches {{{4 7} {5 8} 4} {{2 3} {0 1} 2}} len 6} [r lcs lcs1 lcs2 IDX WITHMATCHLEN]
        assert_equal {matches {{{4 7} {5 8}} {{2 3} {0 1}}} len 6} [r lcs lcs1 lcs2 IDX MINMATCHLEN -1]
    }

    test {LCS picks the same subsequence and ranges as Redis} {
        r mset lcs1 ABCBDAB lcs2 BDCABA
        assert_equal BDAB [r lcs lcs1 lcs2]
        assert_equal {matches {{{5 6} {3 4} 2} {{3 4} {0 1} 2}} len 4} [r lcs lcs1 lcs2 IDX WITHMATCHLEN]
        r mset lcs1 aaaaxbbbbyccccz lcs2 xaaaabbbbccccy
        assert_equal aaaabbbbcccc [r lcs lcs1 lcs2]
        r lcs lcs1 lcs2 IDX MINMATCHLEN 3
    } {matches {{{10 13} {9 12}} {{5 8} {5 8}} {{0 3} {1 4}}} len 12}

    test {LCS of missing keys is of empty strings} {
        r del nokey nokey2
        r set lcs1 abc
        assert_equal {} [r lcs lcs1 nokey]
        assert_equal 0 [r lcs nokey nokey2 LEN]
        r lcs nokey lcs1 IDX
    } {matches {} len 0}

    test {LCS of binary values and of a key with itself} {
        r set lcs1 "a\x00b\xffc"
        r set lcs2 "\x00\xff"
        assert_equal "\x00\xff" [r lcs lcs1 lcs2]
        r lcs lcs1 lcs1 IDX WITHMATCHLEN
    } {matches {{{0 4} {0 4} 5}} len 5}

    test {LCS errors} {
        r mset lcs1 a lcs2 b
        assert_error {ERR If you want both the length and indexes, please just use IDX.*} {r lcs lcs1 lcs2 IDX LEN}
        assert_error {ERR syntax error*} {r lcs lcs1 lcs2 FOO}
        assert_error {ERR syntax error*} {r lcs lcs1 lcs2 MINMATCHLEN}
        assert_error {ERR value is not an integer or out of range*} {r lcs lcs1 lcs2 MINMATCHLEN x}
        assert_error {ERR wrong number of arguments for 'lcs' command*} {r lcs lcs1}
    }

    test {LCS's table is bounded by proto-max-bulk-len} {
        set old [lindex [r config get proto-max-bulk-len] 1]
        r config set proto-max-bulk-len 1048576
        r set lcs1 [string repeat a 600]
        r set lcs2 [string repeat b 600]
        assert_error {ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len*} {r lcs lcs1 lcs2}
        r set lcs2 [string repeat a 400]
        assert_equal 400 [r lcs lcs1 lcs2 LEN]
        r config set proto-max-bulk-len $old
    }

    # ---- OBJECT ENCODING of what the commands leave ---------------------------

    test {OBJECT ENCODING of SET values: int, embstr, raw} {
        set cases {
            123 int -123 int 0 int 12345678901234567890 embstr
            -1234567890123456789 int 9223372036854775807 int 9223372036854775808 embstr
            -0 embstr 01 embstr " 1" embstr 1.5 embstr abc embstr "" embstr
        }
        foreach {v enc} $cases {
            r set e $v
            assert_equal $enc [r object encoding e] "value '$v'"
        }
        r set e [string repeat x 44]
        assert_equal embstr [r object encoding e]
        r set e [string repeat x 45]
        r object encoding e
    } {raw}

    test {OBJECT ENCODING after APPEND, SETRANGE, SETBIT, INCR and INCRBYFLOAT} {
        r del e
        r append e 12
        assert_equal int [r object encoding e]
        r append e 3
        assert_equal raw [r object encoding e]
        r append e ""
        assert_equal raw [r object encoding e]
        r incr e
        assert_equal int [r object encoding e]
        r setrange e 0 9
        assert_equal raw [r object encoding e]
        r set e 5
        r setbit e 0 0 ;# changes nothing, and Redis holds it raw all the same
        assert_equal raw [r object encoding e]
        r del e
        r incrbyfloat e 2
        assert_equal embstr [r object encoding e]
        r mset e 1 e2 abc
        assert_equal {int embstr} [list [r object encoding e] [r object encoding e2]]
        r setex e 100 42
        assert_equal int [r object encoding e]
        r getset e 43
        r object encoding e
    } {int}

    # ---- arity and COMMAND --------------------------------------------------

    test {Wrong number of arguments} {
        foreach cmd {
            {setnx a} {setex a 1} {psetex a 1} {getex} {getdel} {getdel a b}
            {getset a} {msetnx} {append a} {setrange a 0} {incr} {incr a b}
            {incrby a} {decr} {decrby a} {incrbyfloat a} {setbit a 0}
            {getbit a} {bitcount} {lcs a}
        } {
            set name [lindex $cmd 0]
            assert_error "ERR wrong number of arguments for '$name' command*" {r {*}$cmd}
        }
    }

    test {COMMAND INFO of the string and bitmap commands: arity and key positions} {
        set out {}
        foreach c {setnx setex psetex getex getdel getset msetnx append setrange incr incrby
                   decr decrby incrbyfloat setbit getbit bitcount lcs} {
            lassign [lindex [r command info $c] 0] name arity flags first last step
            lappend out $name $arity $first $last $step
        }
        set out
    } {setnx 3 1 1 1 setex 4 1 1 1 psetex 4 1 1 1 getex -2 1 1 1 getdel 2 1 1 1 getset 3 1 1 1 msetnx -3 1 -1 2 append 3 1 1 1 setrange 4 1 1 1 incr 2 1 1 1 incrby 3 1 1 1 decr 2 1 1 1 decrby 3 1 1 1 incrbyfloat 3 1 1 1 setbit 4 1 1 1 getbit 3 1 1 1 bitcount -2 1 1 1 lcs -3 1 2 1}

    test {COMMAND INFO flags of the string commands} {
        set out {}
        foreach c {setnx getex getdel incr setrange getbit bitcount lcs} {
            lappend out $c [lsort [lindex [lindex [r command info $c] 0] 2]]
        }
        set out
    } {setnx {denyoom fast write} getex {fast write} getdel {fast write} incr {denyoom fast write} setrange {denyoom write} getbit {fast readonly} bitcount readonly lcs readonly}

    # Redis 7's own answers (redis-server 7.0), as docs_shape reduces them.
    test {COMMAND DOCS of the string and bitmap commands as Redis 7 describes them} {
        set want {
            setnx {{name key type key key_spec_index 0} {name value type string}}
            setex {{name key type key key_spec_index 0} {name seconds type integer} {name value type string}}
            getex {{name key type key key_spec_index 0} {name expiration type oneof flags optional arguments {{name seconds type integer token EX} {name milliseconds type integer token PX} {name unix-time-seconds type unix-time token EXAT} {name unix-time-milliseconds type unix-time token PXAT} {name persist type pure-token token PERSIST}}}}
            msetnx {{name key_value type block flags multiple arguments {{name key type key key_spec_index 0} {name value type string}}}}
            setrange {{name key type key key_spec_index 0} {name offset type integer} {name value type string}}
            decrby {{name key type key key_spec_index 0} {name decrement type integer}}
            incrbyfloat {{name key type key key_spec_index 0} {name increment type double}}
            setbit {{name key type key key_spec_index 0} {name offset type integer} {name value type integer}}
            bitcount {{name key type key key_spec_index 0} {name index type block flags optional arguments {{name start type integer} {name end type integer} {name index_unit type oneof flags optional arguments {{name byte type pure-token token BYTE} {name bit type pure-token token BIT}}}}}}
            lcs {{name key1 type key key_spec_index 0} {name key2 type key key_spec_index 0} {name len type pure-token token LEN flags optional} {name idx type pure-token token IDX flags optional} {name len type integer token MINMATCHLEN flags optional} {name withmatchlen type pure-token token WITHMATCHLEN flags optional}}
        }
        foreach {c shape} $want {
            set d [dict get [r command docs $c] $c]
            assert_equal $shape [docs_shape {*}[dict get $d arguments]] "COMMAND DOCS $c"
        }
    }

    test {COMMAND DOCS groups: string and bitmap} {
        set out {}
        foreach c {incr lcs getex setbit bitcount} {
            lappend out $c [dict get [dict get [r command docs $c] $c] group]
        }
        set out
    } {incr string lcs string getex string setbit bitmap bitcount bitmap}
}

# ---------------------------------------------------------------------------
# Store objects, and our own limits.
# ---------------------------------------------------------------------------

start_server {tags {string mooncake} overrides {segment-size 16mb}} {
    set owner [redis_client]
    $owner mount sm1 4mb OWNER sw1

    # A store object of the given bytes in the server's pool.
    proc put_bytes {key bytes args} {
        set rep [lindex [r put.start $key [string length $bytes] PREFER self {*}$args] 0]
        lassign $rep seg off len
        r seg.write $seg $off $bytes
        assert_equal OK [r put.end $key CHECKSUM sum:$key]
    }

    test {String reads of a store object: GET, GETRANGE, STRLEN, GETBIT, BITCOUNT, LCS, GETEX} {
        put_bytes so:1 12345
        assert_equal 12345 [r get so:1]
        assert_equal 234 [r getrange so:1 1 3]
        assert_equal 5 [r strlen so:1]
        assert_equal 1 [r getbit so:1 2]
        assert_equal 17 [r bitcount so:1]
        r set sv:1 x3x5x
        assert_equal 35 [r lcs so:1 sv:1]
        assert_equal 12345 [r getex so:1 EX 100]
        assert_range [r ttl so:1] 99 100
        assert_equal raw [r object encoding so:1]
        r type so:1
    } {string}

    test {Changing a store object in place is WRONGTYPE, and changes nothing} {
        put_bytes so:2 12345
        set before [r object.info so:2]
        foreach cmd {
            {append so:2 x} {setrange so:2 0 x} {setrange so:2 0 ""} {incr so:2} {decr so:2}
            {incrby so:2 1} {decrby so:2 1} {incrbyfloat so:2 1} {setbit so:2 0 1} {setbit so:2 0 0}
        } {
            assert_error {WRONGTYPE Operation against a key holding the wrong kind of value*} {r {*}$cmd}
        }
        assert_equal 12345 [r get so:2]
        assert_equal [dict get $before checksum] [dict get [r object.info so:2] checksum]
        assert_equal [dict get $before replicas] [dict get [r object.info so:2] replicas]
    }

    test {SET, GETSET, SETEX and MSET replace a store object with a plain value} {
        put_bytes so:3 abc
        assert_equal abc [r getset so:3 new]
        assert_equal 0 [dict get [r object.info so:3] created]
        assert_equal 4 [r append so:3 x]
        put_bytes so:3b abc REPLACE
        assert_equal OK [r setex so:3b 100 v]
        assert_equal 2 [r append so:3b w]
        assert_equal 0 [r setnx so:3 x]
    }

    test {GETDEL of a store object} {
        put_bytes so:4 hello
        assert_equal hello [r getdel so:4]
        assert_equal 0 [r exists so:4]
    }

    test {A store object only in a mounted segment without endpoints: reads are REMOTE, nothing changes} {
        r put.start so:5 100 PREFER sm1
        r put.end so:5
        foreach cmd {{getbit so:5 3} {bitcount so:5} {lcs so:5 sv:1} {getdel so:5} {getex so:5 PERSIST}
                     {getset so:5 x} {set so:5 x GET}} {
            assert_error {REMOTE*} {r {*}$cmd}
        }
        assert_equal 1 [r exists so:5]
        assert_equal 100 [r strlen so:5]
        # Beyond the end nothing is read.
        assert_equal 0 [r getbit so:5 800]
        assert_error {WRONGTYPE*} {r append so:5 x}
    }

    test {A value grown past max-object-size is refused, the key untouched} {
        r config set max-object-size 1000
        r set big [string repeat a 999]
        assert_error {ERR value is too large (max-object-size)*} {r append big bb}
        assert_error {ERR value is too large (max-object-size)*} {r setrange big 1000 x}
        assert_error {ERR value is too large (max-object-size)*} {r setbit big 8000 1}
        assert_error {ERR value is too large (max-object-size)*} {r setex big2 10 [string repeat a 1001]}
        assert_error {ERR value is too large (max-object-size)*} {r msetnx big3 [string repeat a 1001]}
        assert_equal 1000 [r append big b]
        assert_equal 0 [r setbit big 7999 0]
        r config set max-object-size 1gb
        assert_equal 0 [r exists big2 big3]
        r strlen big
    } {1000}

    test {Commands that create a key obey max-key-size} {
        r config set max-key-size 10
        set k [string repeat k 11]
        foreach cmd [list [list setnx $k v] [list setex $k 10 v] [list append $k v] [list setrange $k 0 v] \
                         [list incr $k] [list incrbyfloat $k 1] [list setbit $k 0 1] [list msetnx $k v]] {
            assert_error {ERR key is too long*} {r {*}$cmd}
        }
        r config set max-key-size 4096
        r exists $k
    } {0}

    test {A full pool: INCR and APPEND answer OOM and change nothing} {
        r flushall
        r config set evict-policy noeviction
        r set grow [string repeat x 1000]
        r set n 1
        set i 0
        while {![catch {r set fill:$i [string repeat y 1048576]}]} { incr i }
        set err {}
        catch {r append grow [string repeat z 1048576]} err
        assert_match {OOM*} $err
        assert_equal 1000 [r strlen grow]
        r flushall
        r config set evict-policy lru
    }

    test {Large values of SETNX, SETEX, GETSET and MSETNX are read straight into the pool} {
        set before [get_info_field r stats values_read_in_place]
        set v [pattern_bytes 100000 3]
        r setnx ip:1 $v
        r setex ip:2 100 $v
        r psetex ip:3 100000 $v
        r getset ip:4 $v
        r msetnx ip:5 $v ip:6 $v
        assert_equal [expr {$before + 6}] [get_info_field r stats values_read_in_place]
        # A refused SETNX drops its placed value: the space comes back.
        set used [get_info_field r store store_pool_used]
        for {set i 0} {$i < 50} {incr i} { assert_equal 0 [r setnx ip:1 $v] }
        assert_equal $used [get_info_field r store store_pool_used]
        r get ip:6
    } [pattern_bytes 100000 3]

    test {Many INCRs of one key leave one object} {
        r flushall
        r set cnt 0
        for {set i 0} {$i < 1000} {incr i} { r incr cnt }
        assert_equal 1000 [r get cnt]
        assert_equal 1 [r dbsize]
        assert_equal OK [r debug alloc-check]
    }

    $owner close
}
