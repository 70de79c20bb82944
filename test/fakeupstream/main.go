// Command fakeupstream plays a remote HTTPS service for the end-to-end
// tests that cannot reach one (a model API, a forge): it makes its own
// CA, writes the CA's certificate where the test says, serves TLS on a
// loopback address with a certificate for 127.0.0.1 and localhost, and
// appends one line per request to a log: method, path, and the
// credential headers it got (x-api-key, Authorization, X-Token), so that
// the test can tell which value arrived. POST …/v1/messages answers like
// Anthropic's Messages API (JSON, with usage) when x-api-key is the one in
// --key-file,
// 401 otherwise; any other request gets "fakeupstream ok PATH".
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18997", "address to serve on")
	caOut := flag.String("ca-out", "", "write the CA's certificate (PEM) here")
	logFile := flag.String("log", "", "append a line per request here")
	keyFile := flag.String("key-file", "", "file holding the x-api-key a Messages request must carry (a file: a command line is in the journal)")
	flag.Parse()
	var key string
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			log.Fatal(err)
		}
		key = strings.TrimSpace(string(b))
	}
	cert, caPEM, err := makeCert()
	if err != nil {
		log.Fatal(err)
	}
	if *caOut != "" {
		if err := os.WriteFile(*caOut, caPEM, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	var mu sync.Mutex
	record := func(r *http.Request) {
		if *logFile == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(*logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			log.Print(err)
			return
		}
		defer f.Close()
		fmt.Fprintf(f, "%s %s x-api-key=%s authorization=%s x-token=%s\n", r.Method, r.URL.Path,
			r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"), r.Header.Get("X-Token"))
	}
	ln, err := tls.Listen("tcp", *listen, &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r)
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/messages") {
			w.Header().Set("Content-Type", "application/json")
			if key == "" || r.Header.Get("X-Api-Key") != key {
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
				return
			}
			fmt.Fprint(w, `{"type":"message","content":[{"type":"text","text":"fakeupstream-answer"}],"usage":{"input_tokens":5,"output_tokens":3}}`)
			return
		}
		fmt.Fprintf(w, "fakeupstream ok %s\n", r.URL.Path)
	})}
	log.Fatal(srv.Serve(ln))
}

// makeCert makes a CA and a certificate for 127.0.0.1 and localhost.
func makeCert() (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fakeupstream CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}
